"""The actor with rollout correction on a real FSDP2 engine (2 gloo ranks, fp32, the tiny model): each
update equals a plain update whose inputs make the same loss, so the wiring (which log-probs anchor
the ratio, which tokens count, how the loss is normalised, which metrics come back) is checked
against the configured loss rather than against itself.

- bypass mode, ppo_clip, with rejection: vanilla PPO against the rollout's log-probs with the
  rejected tokens' advantages zeroed (a zero-advantage token adds nothing, and both divide by the
  mini-batch's tokens before rejection, as verl's);
- decoupled mode: IS weights w on every token of vanilla PPO equal the unweighted loss with the
  advantages scaled by w wherever the clip is inactive, which a ratio of exactly 1 ensures.
"""

from __future__ import annotations

import torch

from tests.helpers.configs import fp32_fsdp, tiny_actor, tiny_model
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.algos.rollout_rs import rejection_mask
from verl_lite.config.schema import OptimConfig
from verl_lite.config.schema_trainer import RolloutCorrectionConfig as correction
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.engine.mesh import build_layout
from verl_lite.workers.actor import PPOActor, compute_log_prob

ROWS, RESP = 8, 5


def _actor(model_dir, rc=None):
    cfg = tiny_actor(ppo_micro_batch_size_per_gpu=2, grad_clip=100.0)
    cfg.clip_ratio_low = cfg.clip_ratio_high = 0.2
    cfg.optim = OptimConfig(lr=1e-3, total_training_steps=2)
    engine = FSDPEngine(
        tiny_model(model_dir), fp32_fsdp(), build_layout("cpu"), role="actor", optim_cfg=cfg.optim
    )
    return engine, PPOActor(engine, cfg, response_length=RESP, temperature=1.0, rollout_correction=rc)


def _params(engine):
    return {n: t.clone() for n, t in engine.iter_full_params()}


def _run(rank, world, model_dir):
    batch = make_ppo_batch(vocab=110, bs=ROWS, prompt_len=6, response_len=RESP, seed=11)
    local = {k: v[rank::world] for k, v in batch.items()}
    mini = ROWS // world
    out = {}
    # bypass: the rollout's log-probs a little off the actor's, rejection on the largest gaps
    engine, actor = _actor(model_dir)
    kw = dict(micro_size=2, max_token_len=None, temperature=1.0, phase="lp")
    logp = compute_log_prob(engine, local, **kw)
    rollout = logp + 0.3 * torch.randn(logp.shape, generator=torch.Generator().manual_seed(rank))
    rc = correction(bypass_mode=True, rollout_rs="token_k2", rollout_rs_threshold=0.02)
    kept, _ = rejection_mask(logp - rollout, local["response_mask"], "token_k2", 0.02)
    data = {**local, "old_log_probs": rollout, "rollout_log_probs": rollout}
    engine, actor = _actor(model_dir, rc)
    metrics = actor.update(data, mini_size=mini, micro_size=2)
    plain_engine, plain = _actor(model_dir)
    plain.update({**data, "advantages": local["advantages"] * kept}, mini_size=mini, micro_size=2)
    out["bypass"] = (_params(engine), _params(plain_engine), metrics, kept, local["response_mask"])
    # decoupled: old = the actor's own log-probs (ratio 1: no clip), weights from the rollout's
    w = torch.rand(logp.shape, generator=torch.Generator().manual_seed(7 + rank)) * 2 * local["response_mask"]
    data = {**local, "old_log_probs": logp, "rollout_is_weights": w, "rollout_log_probs": rollout}
    engine, actor = _actor(model_dir, correction(rollout_is="token"))
    metrics = actor.update(data, mini_size=mini, micro_size=2)
    plain_engine, plain = _actor(model_dir)
    plain.update({**local, "old_log_probs": logp, "advantages": local["advantages"] * w}, mini, 2)
    out["decoupled"] = (_params(engine), _params(plain_engine), metrics)
    return out


def test_rollout_correction_updates_equal_the_loss_they_stand_for(tiny_model_dir):
    for out in run_ranks(_run, 2, tiny_model_dir):
        params, plain, metrics, kept, mask = out["bypass"]
        assert 0 < kept.sum() < mask.sum(), "some tokens rejected, some kept"
        worst = max((params[n] - plain[n]).abs().max().item() for n in params)
        assert worst < 1e-6, f"bypass: params differ by {worst}"
        assert 0 < metrics["rollout_corr/rollout_rs_masked_fraction"] < 1
        assert "actor/rollout_corr/kl" not in metrics and "rollout_corr/kl" in metrics
        params, plain, metrics = out["decoupled"]
        worst = max((params[n] - plain[n]).abs().max().item() for n in params)
        assert worst < 1e-5, f"decoupled: params differ by {worst}"  # w (-A r) vs -(A w) r: rounding
        assert metrics["rollout_corr/kl"] != 0, "the actor's off-policy metrics against the rollout"
