"""LoRA in the HF rollout: its copy carries the base from disk and takes only the adapter per sync.

One gloo rank (the engine needs a process group), a LoRA actor engine and the HF rollout side by
side. After a sync the rollout's model gives the actor's log-probs; after an update without a sync
it does not (the check can fail); a sync moves the adapter's bytes only.
"""

from __future__ import annotations

import torch
from torch.distributed.device_mesh import init_device_mesh

from tests.helpers.configs import fp32_fsdp, tiny_actor, tiny_model, tiny_optim, tiny_rollout
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.rollout.base import SamplingParams
from verl_lite.rollout.hf_rollout import HFRollout
from verl_lite.rollout.weight_sync import AdapterSync, build_weight_sync
from verl_lite.workers.actor import PPOActor, compute_log_prob

RESPONSE = 5


def _rollout_logp(rollout, batch):
    with torch.no_grad():
        logits = rollout.model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits[:, -RESPONSE - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(-1, batch["responses"][..., None])[..., 0]


def _hf_lora(rank, world, model_dir):
    model_cfg = tiny_model(
        model_dir, lora_rank=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"]
    )
    optim = tiny_optim(lr=2e-2, weight_decay=0.0, total_training_steps=2)
    cfg = tiny_actor(grad_clip=1.0, ppo_epochs=1, entropy_coeff=0.0, use_kl_loss=False, optim=optim)
    engine = FSDPEngine(
        model_cfg,
        fp32_fsdp(),
        init_device_mesh("cpu", (world,)),
        role="actor",
        optim_cfg=cfg.optim,
        grad_clip=1.0,
    )
    actor = PPOActor(engine, cfg, response_length=RESPONSE, temperature=1.0)
    rollout = HFRollout(model_cfg, tiny_rollout(seed=3), build_tokenizer(), rank=0)
    sync = build_weight_sync(engine, rollout)
    batch = make_ppo_batch(vocab=110, bs=8, response_len=RESPONSE, seed=4)

    def diff():
        want = compute_log_prob(engine, batch, micro_size=8, max_token_len=None, temperature=1.0, phase="x")
        mask = batch["response_mask"].bool()
        return (_rollout_logp(rollout, batch) - want).abs()[mask].max().item()

    out = {
        "is_adapter_sync": isinstance(sync, AdapterSync),
        "adapter_bytes": engine.num_trainable_params() * 4,
    }
    actor.update(batch, mini_size=8, micro_size=4)
    out["stale"] = diff()
    out["sync_gb"] = sync()["update_weights_gb"]
    out["synced"] = diff()
    params = SamplingParams(n=2, temperature=1.0, response_length=RESPONSE)
    out["generated"] = rollout.generate_tokens(
        batch["input_ids"][:2, :6], batch["attention_mask"][:2, :6], params
    )[0]
    out["adapted"] = sorted({n.split(".")[-4] for n in rollout.params if ".lora_A." in n})
    return out


def test_hf_rollout_follows_the_adapter_sync(tiny_model_dir):
    out = run_ranks(_hf_lora, 1, tiny_model_dir)[0]
    assert out["is_adapter_sync"]
    assert out["adapted"] == ["down_proj", "q_proj", "v_proj"], "target_modules as a list"
    assert out["stale"] > 1e-3, "an update without a sync leaves the rollout behind"
    assert out["synced"] < 1e-5, "after the sync the rollout holds the actor's policy"
    assert round(out["sync_gb"] * 1024**3) == out["adapter_bytes"], "only the adapter moves"
    assert out["generated"].shape[0] == 4
