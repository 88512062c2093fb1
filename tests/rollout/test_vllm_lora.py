"""LoRA in the vLLM rollout on CPU, for real: vLLM serves the actor's adapter, synced from memory.

As in a worker: a (1-rank) gloo group and a LoRA actor engine first, then a vLLM engine with LoRA
enabled that joins the group and starts without weights (load_format=dummy). The first sync brings
the base weights and the adapter; later syncs only the adapter. The sampled-token log-prob diff
against the actor is the proof that vLLM runs the actor's current policy: small after a sync, large
when a sync is skipped after an update (the check can fail).
"""

import datetime
import gc
import os

import pytest
import torch
import torch.distributed as dist

pytest.importorskip("vllm", reason="the vLLM rollout needs vllm (make install)")

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402

from tests.helpers.configs import fp32_fsdp, tiny_model, tiny_optim, tiny_rollout  # noqa: E402
from tests.helpers.dist import free_port  # noqa: E402
from tests.rollout.test_vllm_rollout import PROMPT_LEN, RESPONSE_LEN, _train_one_step, rollout_batch  # noqa: E402
from verl_lite.config.schema import TINY_MODEL  # noqa: E402
from verl_lite.data import assets  # noqa: E402
from verl_lite.engine.fsdp_engine import FSDPEngine  # noqa: E402
from verl_lite.rollout.base import SamplingParams, compute_logprob_diff_metrics  # noqa: E402
from verl_lite.rollout.weight_sync import AdapterSync, FullSync, build_weight_sync  # noqa: E402
from verl_lite.utils.hf_model import load_tokenizer  # noqa: E402
from verl_lite.workers.actor import compute_log_prob  # noqa: E402

GB = 1024**3


@pytest.fixture(scope="module")
def hybrid_lora():
    """(actor engine with adapters, vLLM rollout with LoRA, tokenizer, first sync's stats)."""
    from verl_lite.rollout.vllm_rollout import VLLMRollout

    saved_env = dict(os.environ)
    os.environ.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())
    )
    dist.init_process_group("gloo", rank=0, world_size=1, timeout=datetime.timedelta(seconds=120))
    model_cfg = tiny_model(
        assets.resolve(TINY_MODEL), lora_rank=8, lora_alpha=16, target_modules="all-linear"
    )
    tokenizer = load_tokenizer(model_cfg.path)
    actor = FSDPEngine(
        model_cfg,
        fp32_fsdp(),
        init_device_mesh("cpu", (1,)),
        role="actor",
        optim_cfg=tiny_optim(lr=5e-2),
        grad_clip=1.0,
    )
    rollout_cfg = tiny_rollout(
        seed=3,
        cpu_kv_cache_gb=0.25,
        max_model_len=PROMPT_LEN + RESPONSE_LEN,
        prompt_length=PROMPT_LEN,
        response_length=RESPONSE_LEN,
        load_format="dummy",
    )
    rollout = VLLMRollout(model_cfg, rollout_cfg, tokenizer, rank=0)
    sync = build_weight_sync(actor, rollout)
    first = sync()
    yield actor, rollout, tokenizer, sync, first
    del rollout.llm  # vLLM's shutdown destroys its groups and the default one (the trainer never does this)
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()
    os.environ.clear()
    os.environ.update(saved_env)


def logprob_diff(actor, batch) -> dict[str, float]:
    actor_logp = compute_log_prob(
        actor, batch, micro_size=64, max_token_len=None, temperature=1.0, phase="lp"
    )
    return compute_logprob_diff_metrics(batch["rollout_log_probs"], actor_logp, batch["response_mask"])


def test_first_sync_brings_the_base_then_only_the_adapter_moves(hybrid_lora):
    actor, rollout, tok, sync, first = hybrid_lora
    assert isinstance(sync, AdapterSync) and not isinstance(sync, FullSync)
    total = sum(p.numel() * 4 for p in actor.module.parameters())  # the model once, fp32
    adapter = actor.num_trainable_params() * 4
    # base + adapter, plus the tied lm_head that vLLM's reload takes as a layer of its own
    embedding = actor.module.get_base_model().model.embed_tokens.weight.numel() * 4
    assert round(first["update_weights_gb"] * GB) == total + embedding
    assert rollout.direct_reload, "the base arrives by the direct path (vllm_reload.py), adapters wrapped"
    params = SamplingParams(n=2, temperature=1.0, response_length=RESPONSE_LEN)
    _, batch = rollout_batch(rollout, tok, params)
    _train_one_step(actor, batch)
    again = sync()
    assert round(again["update_weights_gb"] * GB) == adapter, "after the first sync only the adapter moves"
    assert adapter < total / 5


def test_logprob_diff_small_after_adapter_sync_and_large_when_skipped(hybrid_lora):
    actor, rollout, tok, sync, _ = hybrid_lora
    params = SamplingParams(n=4, temperature=1.0, response_length=RESPONSE_LEN)
    sync()
    _, batch = rollout_batch(rollout, tok, params)
    synced = logprob_diff(actor, batch)
    assert synced["rollout/actor_logprob_abs_diff_max"] < 1e-4, synced

    _train_one_step(actor, batch)  # the adapter moves on; vLLM (and its prefix cache) still hold the old one
    _, stale_batch = rollout_batch(rollout, tok, params)
    stale = logprob_diff(actor, stale_batch)
    assert stale["rollout/actor_logprob_abs_diff_max"] > 1e-2, stale

    sync()  # same prompts: a stale prefix cache would show here
    _, fresh_batch = rollout_batch(rollout, tok, params)
    fresh = logprob_diff(actor, fresh_batch)
    assert fresh["rollout/actor_logprob_abs_diff_max"] < 1e-4, fresh


def test_vllm_serves_the_adapter_not_the_base(hybrid_lora):
    """The adapter matters to vLLM's samples: the base model's log-probs of them are far off."""
    actor, rollout, tok, sync, _ = hybrid_lora
    sync()
    _, batch = rollout_batch(rollout, tok, SamplingParams(n=4, temperature=1.0, response_length=RESPONSE_LEN))
    with actor.adapters_disabled():
        base = logprob_diff(actor, batch)
    assert base["rollout/actor_logprob_abs_diff_max"] > 1e-2, base


def test_lora_ranks_round_up_to_what_vllm_serves():
    from verl_lite.rollout.vllm_rollout import vllm_max_lora_rank

    assert [vllm_max_lora_rank(r) for r in (1, 2, 8, 9, 64)] == [1, 8, 8, 16, 64]
    with pytest.raises(ValueError, match=r"lora_rank=100000: vLLM serves LoRA ranks up to"):
        vllm_max_lora_rank(100000)


def test_a_sync_leaves_the_actors_adapter_untouched(hybrid_lora):
    """vLLM scales lora_B in place when it loads an adapter; on one rank a gathered tensor can be the
    actor's own storage, so the rollout must hand vLLM copies (without them each sync doubled B)."""
    actor, _, _, sync, _ = hybrid_lora
    trained = lambda: {n: t.clone() for n, t in actor.iter_full_params(lambda n: n not in actor.frozen_names)}  # noqa: E731
    before = trained()
    sync()
    sync()
    after = trained()
    assert all(torch.equal(before[n], after[n]) for n in before)


def test_every_adapter_sync_is_checked_and_one_never_delivered_is_stopped(hybrid_lora, monkeypatch):
    """rollout/weight_check.py reads the adapter where vLLM's LoRA manager put it (the slot of every
    LoRA layer, B scaled as vLLM folds alpha / r in): a real sync passes, base included; an adapter
    that never reaches the engine (its load on the worker does nothing) is stopped at that sync."""
    from tests.rollout.test_weight_check import _stopped
    from verl_lite.rollout import vllm_rollout
    from verl_lite.rollout.weight_check import SyncCheck

    actor, rollout, tok, sync, _ = hybrid_lora
    check = SyncCheck(actor, rollout, "vllm")
    sync()
    stats = check(base=True, sync=1, version=0)
    assert stats["perf/weight_sync_unverified_params"] == 0, stats
    _, batch = rollout_batch(rollout, tok, SamplingParams(n=2, temperature=1.0, response_length=RESPONSE_LEN))
    _train_one_step(actor, batch)
    with monkeypatch.context() as patch:
        patch.setattr(vllm_rollout, "_load_adapter_on_worker", lambda *args: 0)
        sync()
    msg = _stopped(check, base=False, sync=2, version=1)
    assert "(actor version 1, vllm rollout) did not arrive" in msg and ".lora_" in msg, msg
    sync()
    assert _stopped(check, base=False, sync=3, version=1) == ""
