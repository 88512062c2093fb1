"""verl's derived values, filled in at start-up (the resolve step `derive_values`, registered in
verl_lite/preflight.py RESOLVE, before the checks and the freeze).

Pure config arithmetic, no component knowledge: a deprecated global micro-batch size becomes a
per-GPU one (verl's rule), null clip bounds become clip_ratio, a null data.gen_batch_size is
train_batch_size (verl 0.9.1's default and rule), the deprecated optim.warmup_style replaces
optim.lr_scheduler_type. Everything else verl derives is a link in the schema.
"""

from __future__ import annotations

from verl_lite.config.common import ARR, dp_size, per_gpu, world_size
from verl_lite.config.run import Run
from verl_lite.config.schema import PPOTrainerConfig


def _clip_bounds(a) -> tuple[float, float]:
    """verl's rule: a bound set to null is clip_ratio (both default to 0.2, so clip_ratio alone
    changes nothing unless they are nulled)."""
    return (
        a.clip_ratio if a.clip_ratio_low is None else a.clip_ratio_low,
        a.clip_ratio if a.clip_ratio_high is None else a.clip_ratio_high,
    )


def _scheduler(optim) -> None:
    """verl's deprecated optim.warmup_style, when set, replaces optim.lr_scheduler_type."""
    if optim.warmup_style is not None:
        optim.lr_scheduler_type = optim.warmup_style


def _linked_per_gpu(global_size, per_gpu_size, world: int, key: str, problems: list[str]):
    """The critic's per-GPU keys default to its deprecated global ones (verl's links): a global size
    given on its own (the per-GPU one still equal to it) becomes a per-GPU size, as in verl's worker."""
    if global_size is not None and per_gpu_size == global_size:
        per_gpu_size = None
    return per_gpu(global_size, per_gpu_size, world, key, problems)


def _micro_sizes(cfg: PPOTrainerConfig, world: int, problems: list[str]) -> None:
    """verl splits the deprecated global micro sizes over a role's data-parallel ranks (the world over
    its sequence-parallel size, config/common.dp_size)."""
    arr, c, rm = cfg.actor_rollout_ref, cfg.critic, cfg.reward_model
    a, dp, critic_dp = arr.actor, dp_size(cfg), dp_size(cfg, "critic")
    key = f"{ARR}.actor.ppo_micro_batch_size"
    a.ppo_micro_batch_size_per_gpu = per_gpu(
        a.ppo_micro_batch_size, a.ppo_micro_batch_size_per_gpu, dp, key, problems
    )
    for section in ("rollout", "ref"):
        sub = getattr(arr, section)
        key = f"{ARR}.{section}.log_prob_micro_batch_size"
        sub.log_prob_micro_batch_size_per_gpu = per_gpu(
            sub.log_prob_micro_batch_size, sub.log_prob_micro_batch_size_per_gpu, dp, key, problems
        )
    c.ppo_micro_batch_size_per_gpu = _linked_per_gpu(
        c.ppo_micro_batch_size,
        c.ppo_micro_batch_size_per_gpu,
        critic_dp,
        "critic.ppo_micro_batch_size",
        problems,
    )
    c.forward_micro_batch_size_per_gpu = _linked_per_gpu(
        c.forward_micro_batch_size,
        c.forward_micro_batch_size_per_gpu,
        critic_dp,
        "critic.forward_micro_batch_size",
        problems,
    )
    rm.micro_batch_size_per_gpu = per_gpu(
        rm.micro_batch_size, rm.micro_batch_size_per_gpu, world, "reward_model.micro_batch_size", problems
    )


def derive_values(cfg: PPOTrainerConfig, run: Run | None) -> list[str]:
    """Fill verl's derived values in place; problems for what cannot be derived."""
    problems: list[str] = []
    a = cfg.actor_rollout_ref.actor
    a.clip_ratio_low, a.clip_ratio_high = _clip_bounds(a)
    if cfg.data.gen_batch_size is None:  # verl 0.9.1: `gen_batch_size or train_batch_size`
        cfg.data.gen_batch_size = cfg.data.train_batch_size
    _scheduler(a.optim)
    _scheduler(cfg.critic.optim)
    _micro_sizes(cfg, world_size(cfg), problems)
    return problems
