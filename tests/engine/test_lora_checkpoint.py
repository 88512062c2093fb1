"""LoRA checkpoints on 2 gloo ranks: the adapter and its optimizer state resume exactly; the PEFT
adapter folder, the merged HF export and the model merger all give the policy the engine held.

The source engine (offload_policy) trains one update and saves; fresh LoRA engines in other offload
modes load and take the same second update as the source: their adapters must equal the source's.
Log-probs of the saved policy are recorded at save time; every exported form must reproduce them.
"""

from __future__ import annotations

import os

import pytest
import torch
from peft import PeftModel
from torch.distributed.device_mesh import init_device_mesh
from transformers import AutoModelForCausalLM

from tests.helpers.bad_inputs import pickle_globals
from tests.helpers.configs import fp32_fsdp, tiny_actor, tiny_model, tiny_optim
from tests.helpers.dist import run_ranks
from tests.helpers.merged import assert_bf16_of
from tests.helpers.models import make_ppo_batch
from verl_lite.engine.checkpoint import LORA_DIR, MODEL_DIR, load_engine, save_engine
from verl_lite.engine.dcp_safe import ALLOWED, read_dcp_metadata
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.model_merger import merge
from verl_lite.workers.actor import PPOActor, compute_log_prob

MODES = {
    "none": {},
    "param_opt_offload": {"param_offload": True, "optimizer_offload": True},
    "offload_policy": {"offload_policy": True},
}
ROWS, RESPONSE = 8, 5


def _model_cfg(path, **lora):
    lora = lora or {"lora_rank": 8, "lora_alpha": 16}
    return tiny_model(path, target_modules="all-linear", **lora)


def _build(model_cfg, mesh, fsdp_over):
    optim = tiny_optim(lr=1e-2, weight_decay=0.01, total_training_steps=4, lr_scheduler_type="cosine")
    cfg = tiny_actor(grad_clip=1.0, ppo_epochs=1, entropy_coeff=0.0, use_kl_loss=False, optim=optim)
    engine = FSDPEngine(model_cfg, fp32_fsdp(**fsdp_over), mesh, role="actor", optim_cfg=optim, grad_clip=1.0)
    return engine, PPOActor(engine, cfg, response_length=RESPONSE, temperature=1.0)


def _adapters(engine) -> dict[str, torch.Tensor]:
    return {n: t.clone() for n, t in engine.iter_full_params(lambda n: n not in engine.frozen_names)}


def _max_diff(a, b) -> float:
    assert sorted(a) == sorted(b) and a
    return max((a[n] - b[n]).abs().max().item() for n in a)


def _logp(engine, batch):
    """The engine's log-probs of the response tokens (0 on padding: the engine computes each
    micro-batch only up to its longest response)."""
    logp = compute_log_prob(engine, batch, micro_size=4, max_token_len=None, temperature=1.0, phase="x")
    return logp * batch["response_mask"]


def _save_load_train(rank, world, model_dir, path):
    mesh = init_device_mesh("cpu", (world,))
    batches = [make_ppo_batch(vocab=110, bs=ROWS, response_len=RESPONSE, seed=30 + s) for s in range(3)]
    rows = ROWS // world
    local = [{k: v[rank * rows : (rank + 1) * rows] for k, v in b.items()} for b in batches]

    source, actor = _build(_model_cfg(model_dir), mesh, MODES["offload_policy"])
    actor.update(local[0], mini_size=rows // 2, micro_size=2)
    at_save = _logp(source, batches[2])  # the full probe batch on every rank
    save_engine(source, path, ["model", "optimizer", "extra", "hf_model"])
    actor.update(local[1], mini_size=rows // 2, micro_size=2)
    want = _adapters(source)

    out = {"at_save": at_save, "diff": {}}
    for mode, fsdp_over in MODES.items():
        engine, resumed = _build(_model_cfg(model_dir), mesh, fsdp_over)
        load_engine(engine, path, ["model", "optimizer", "extra"])
        resumed.update(local[1], mini_size=rows // 2, micro_size=2)
        out["diff"][mode] = _max_diff(_adapters(engine), want)
    # lora_adapter_path: a fresh run continues from the saved adapter (its rank and targets)
    adapter_cfg = _model_cfg(model_dir, lora_rank=0, lora_adapter_path=os.path.join(path, LORA_DIR))
    continued, _ = _build(adapter_cfg, mesh, {})
    out["from_adapter_path"] = _logp(continued, batches[2])
    out["continued_trainable"] = continued.num_trainable_params() == source.num_trainable_params()
    return out


@pytest.fixture(scope="module")
def saved(tiny_model_dir, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("lora_ckpt") / "actor")
    return path, run_ranks(_save_load_train, 2, tiny_model_dir, path)


def test_resume_is_exact_in_every_offload_mode(saved):
    _, results = saved
    for r in results:
        for mode, diff in r["diff"].items():
            assert diff < 1e-6, f"{mode}: adapters differ by {diff} from the uninterrupted engine"


def test_checkpoint_model_holds_only_the_adapter(saved):
    path, _ = saved
    keys = list(read_dcp_metadata(os.path.join(path, MODEL_DIR)).state_dict_metadata)
    assert keys and all(".lora_A." in k or ".lora_B." in k for k in keys), keys
    for sub in ("model", "optimizer"):  # what DCP wrote for the adapters: all allowed, nothing else
        with open(os.path.join(path, sub, ".metadata"), "rb") as f:
            assert pickle_globals(f.read()) <= ALLOWED
    files = sorted(os.listdir(os.path.join(path, LORA_DIR)))
    assert files == ["adapter_config.json", "adapter_model.safetensors"]


def _probe_logp(model):
    batch = make_ppo_batch(vocab=110, bs=ROWS, response_len=RESPONSE, seed=32)
    with torch.no_grad():
        logits = (
            model(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"],
            )
            .logits[:, -RESPONSE - 1 : -1]
            .float()
        )
    logp = torch.log_softmax(logits, -1).gather(-1, batch["responses"][..., None])[..., 0]
    return logp * batch["response_mask"]


def test_adapter_merged_export_and_merger_reproduce_the_saved_policy(saved, tiny_model_dir, tmp_path):
    path, results = saved
    want = results[0]["at_save"]
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert (_probe_logp(base) - want).abs().max() > 1e-3, "the adapter must have moved the policy"
    peft = PeftModel.from_pretrained(base, os.path.join(path, LORA_DIR))
    merged = merge(path, str(tmp_path / "merged"))
    assert os.path.isfile(os.path.join(merged, LORA_DIR, "adapter_model.safetensors"))
    for label, model in (
        ("lora_adapter (PEFT)", peft),
        ("huggingface/ (hf_model, merged)", AutoModelForCausalLM.from_pretrained(f"{path}/huggingface")),
    ):
        diff = (_probe_logp(model) - want).abs().max().item()
        assert diff < 1e-5, f"{label}: log-probs differ by {diff}"
    assert_bf16_of(merged, f"{path}/huggingface")  # the merger: the same merged weights, in verl's bf16


def test_lora_adapter_path_continues_from_the_saved_adapter(saved):
    _, results = saved
    for r in results:
        assert r["continued_trainable"]
        assert (r["from_adapter_path"] - r["at_save"]).abs().max() < 1e-6
