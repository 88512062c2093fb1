"""Every weight sync verified under vLLM tensor parallelism (rollout/vllm_tp_layout.py), on CPU for real.

Two gloo ranks, each an FSDP2 LoRA actor and one TP=2 vLLM engine with LoRA, on the tiny Qwen2 with
ONE KV head: with TP=2 vLLM slices q across the ranks but holds the K/V head (and its qkv bias) on
both, holds the norms on both, pads the vocabulary of the tied embedding, and lays the LoRA slots out
per layer kind (a column layer's A on both ranks, a merged qkv's k/v B on both, a row layer's B on
both). The rollout is bf16 as verl's default, the base sent in bf16: where vLLM's CPU kernel keeps
a bias in fp32 (the sgl-kernel path, on CPUs with AMX) it holds bf16-rounded values in fp32. The
check adds every rank's shares and must be exact there -- the verl multi-turn scripts' false alarms
on qkv_proj.bias were these two -- and must still stop a sync that did not arrive: the base weights
(a reload that loads nothing) and the adapter (a load on the worker that does nothing).
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from tests.helpers.dist import run_ranks
from tests.helpers.tp_lock import tp_engine_lock

PROMPT_LEN, RESPONSE_LEN = 16, 8


def _moved(actor, adapter: bool) -> None:
    """The actor's base weights (or its adapter) change, as an update changes them."""
    frozen = actor.frozen_names
    with torch.no_grad():
        for name, param in actor.module.named_parameters():
            if (name not in frozen) == adapter:
                getattr(param, "_local_tensor", param).add_(0.01)


def _check_tp2(rank, world, model_dir):
    from torch.distributed.device_mesh import init_device_mesh

    from tests.helpers.configs import fp32_fsdp, tiny_model, tiny_optim, tiny_rollout
    from tests.rollout.test_weight_check import _stopped
    from verl_lite.engine.fsdp_engine import FSDPEngine
    from verl_lite.engine.lora import base_param_name
    from verl_lite.rollout import vllm_rollout
    from verl_lite.rollout.weight_check import SyncCheck
    from verl_lite.rollout.weight_sync import build_weight_sync
    from verl_lite.utils.hf_model import load_tokenizer

    os.environ["LOCAL_RANK"] = "0"  # one process per "node" as far as vLLM's CPU worker is concerned
    model_cfg = tiny_model(model_dir, lora_rank=8, lora_alpha=16, target_modules="all-linear")
    mesh = init_device_mesh("cpu", (world,))
    actor = FSDPEngine(model_cfg, fp32_fsdp(), mesh, role="actor", optim_cfg=tiny_optim(), grad_clip=1.0)
    cfg = tiny_rollout(
        seed=3,
        cpu_kv_cache_gb=0.25,
        max_model_len=PROMPT_LEN + RESPONSE_LEN,
        load_format="dummy",
        tensor_model_parallel_size=2,
        dtype="bf16",
    )
    rollout = vllm_rollout.VLLMRollout(model_cfg, cfg, load_tokenizer(model_dir), rank=rank)
    # as the worker builds them: the base sent in the rollout's dtype (verl's default bf16)
    sync = build_weight_sync(actor, rollout, dtype=torch.bfloat16)
    check = SyncCheck(actor, rollout, "vllm", sent_dtype=torch.bfloat16)
    sync()  # the base (the engine started from dummy weights) and the adapter
    out = {"first": check(base=True, sync=1, version=0)}
    qkv = rollout.llm.collective_rpc(lambda w: w.model_runner.get_model().model.layers[0].self_attn.qkv_proj)[
        0
    ]
    out["kv_replicas"], out["bias_dtype"] = qkv.base_layer.num_kv_head_replicas, qkv.base_layer.bias.dtype

    def send_base():
        frozen = actor.frozen_names
        gathered = actor.iter_full_params(frozen.__contains__, dtype=torch.bfloat16)  # as AdapterSync
        return rollout.update_weights((base_param_name(n), t) for n, t in gathered)

    _moved(actor, adapter=False)
    real = vllm_rollout.reload_weights
    vllm_rollout.reload_weights = lambda worker, weights: [*weights] and True  # walks, loads nothing
    send_base()
    vllm_rollout.reload_weights = real
    sync()  # the adapter, as after every base load (a reload empties the LoRA slot)
    out["base_skipped"] = _stopped(check, base=True, sync=2, version=1)
    send_base()
    sync()
    out["base_resent"] = _stopped(check, base=True, sync=3, version=1)

    _moved(actor, adapter=True)
    real = vllm_rollout._load_adapter_on_worker
    vllm_rollout._load_adapter_on_worker = lambda *args: 0  # the adapter never reaches the slot
    sync()
    vllm_rollout._load_adapter_on_worker = real
    out["adapter_skipped"] = _stopped(check, base=False, sync=4, version=2)
    sync()
    out["adapter_resent"] = check(base=False, sync=5, version=2)
    dist.barrier()  # no rank tears down the engine's groups while another still uses them
    return out


@pytest.fixture(scope="module")
def tp2(tiny_model_dir):
    pytest.importorskip("vllm", reason="the vLLM rollout needs vllm (make install)")
    with tp_engine_lock():  # no other TP engine of the suite runs meanwhile (tests/helpers/tp_lock.py)
        return run_ranks(_check_tp2, 2, tiny_model_dir, timeout_s=600)


def test_tp2_sync_with_replicated_kv_heads_passes_exactly(tp2):
    for out in tp2:
        assert out["kv_replicas"] == 2, "the K/V head is held by both TP ranks"
        assert out["first"]["perf/weight_sync_unverified_params"] == 0, out["first"]
        assert out["first"]["perf/weight_sync_verified_params"] > 20, out["first"]
        assert out["base_resent"] == "", out["base_resent"]
        assert out["adapter_resent"]["perf/weight_sync_unverified_params"] == 0, out["adapter_resent"]


def test_tp2_skipped_base_or_adapter_sync_is_stopped(tp2):
    for out in tp2:
        msg = out["base_skipped"]
        assert msg.startswith(
            "weight sync 2 (actor version 1, vllm rollout) did not arrive: the engine's model."
        ), msg
        assert ".lora_" not in msg, msg
        msg = out["adapter_skipped"]
        assert "weight sync 4 (actor version 2, vllm rollout) did not arrive" in msg and ".lora_" in msg, msg
