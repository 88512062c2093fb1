"""The FSDP2 engine on gloo ranks against a single-process, full-batch reference (fp32).

The reference is written independently of the engine: a plain HF model, the whole batch in one
forward, the loss from algos/ with the batch's own counts, one AdamW step after clipping.
"""

import math

import torch
from torch.distributed.device_mesh import init_device_mesh
from transformers import AutoModelForCausalLM

from tests.helpers.configs import fp32_fsdp, tiny_actor, tiny_model
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.algos.logprob import logprobs_from_logits
from verl_lite.algos.loss_agg import agg_loss
from verl_lite.algos.policy_loss import compute_policy_loss_vanilla
from verl_lite.config.schema import ActorConfig, OptimConfig
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.workers.actor import PPOActor

LR, CLIP = 1e-2, 1.0


def _actor_cfg(micro: int) -> ActorConfig:
    cfg = tiny_actor(ppo_micro_batch_size_per_gpu=micro, grad_clip=CLIP)
    cfg.clip_ratio_low = cfg.clip_ratio_high = 0.2
    cfg.optim = OptimConfig(lr=LR, weight_decay=0.01, total_training_steps=10)
    return cfg


def _engine_update(rank, world, model_dir, batch, micro):
    mesh = init_device_mesh("cpu", (world,))
    cfg = _actor_cfg(micro)
    engine = FSDPEngine(
        tiny_model(model_dir), fp32_fsdp(), mesh, role="actor", optim_cfg=cfg.optim, grad_clip=CLIP
    )
    actor = PPOActor(engine, cfg, response_length=batch["responses"].shape[1], temperature=1.0)
    rows = batch["responses"].shape[0] // world
    local = {k: v[rank * rows : (rank + 1) * rows] for k, v in batch.items()}
    metrics = actor.update(local, mini_size=rows, micro_size=micro)
    params = {name: t.clone() for name, t in engine.iter_full_params()}
    return metrics, params


def _reference_update(model_dir, batch):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    optim = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    width = batch["responses"].shape[1]
    logits = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
    ).logits[:, -width - 1 : -1]
    logp = logprobs_from_logits(logits, batch["responses"])
    terms = compute_policy_loss_vanilla(batch["old_log_probs"], logp, batch["advantages"])
    loss = agg_loss(terms["pg_loss"], batch["response_mask"], "token-mean")
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    optim.step()
    return loss.item(), norm.item(), {n: p.detach() for n, p in model.named_parameters()}


def test_two_rank_update_matches_full_batch_reference(tiny_model_dir):
    batch = make_ppo_batch(vocab=110, bs=8, seed=3)
    ref_loss, ref_norm, ref_params = _reference_update(tiny_model_dir, batch)
    results = run_ranks(_engine_update, 2, tiny_model_dir, batch, 2)
    (metrics, params), (metrics1, _) = results
    assert metrics == metrics1, "every rank reports the same (mini-batch) metrics"
    assert abs(metrics["actor/pg_loss"] - ref_loss) < 1e-5
    assert abs(metrics["actor/grad_norm"] - ref_norm) < 1e-5
    assert set(params) == set(ref_params)
    worst = max((params[n] - ref_params[n]).abs().max().item() for n in params)
    assert worst < 1e-5, f"max param difference {worst}"
    moved = max(
        (params[n] - AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()[n]).abs().max().item()
        for n in params
    )
    assert moved > 1e-4, "the update must actually change the weights for the comparison to mean anything"


def _nonfinite_then_finite(rank, world, model_dir, batch):
    mesh = init_device_mesh("cpu", (world,))
    cfg = _actor_cfg(4)
    engine = FSDPEngine(
        tiny_model(model_dir),
        fp32_fsdp(optimizer_offload=True),
        mesh,
        role="actor",
        optim_cfg=cfg.optim,
        grad_clip=CLIP,
    )
    actor = PPOActor(engine, cfg, response_length=batch["responses"].shape[1], temperature=1.0)
    before = {n: t.clone() for n, t in engine.iter_full_params()}
    poisoned = dict(batch, advantages=batch["advantages"].clone())
    poisoned["advantages"][0, 0] = float("nan")
    bad = actor.update(poisoned, mini_size=8, micro_size=4)
    after_bad = {n: t.clone() for n, t in engine.iter_full_params()}
    skips = engine.pop_metrics()[0]["actor/nonfinite_grad_skips"]
    good = actor.update(batch, mini_size=8, micro_size=4)
    after_good = {n: t.clone() for n, t in engine.iter_full_params()}
    return bad, skips, len(engine.optimizer.state), before, after_bad, after_good, good


def test_nonfinite_grad_norm_skips_the_step_and_is_counted(tiny_model_dir):
    batch = make_ppo_batch(vocab=110, bs=8, seed=4)
    bad, skips, opt_state, before, after_bad, after_good, good = run_ranks(
        _nonfinite_then_finite, 1, tiny_model_dir, batch
    )[0]
    assert not math.isfinite(bad["actor/grad_norm"]) and skips == 1
    assert all(torch.equal(before[n], after_bad[n]) for n in before), (
        "a skipped step must not touch the weights"
    )
    assert math.isfinite(good["actor/grad_norm"])
    assert opt_state > 0  # the later good step ran (and its state round-tripped through the host)
    assert any(not torch.equal(before[n], after_good[n]) for n in before)
