"""The algorithm's start-up check (registered in verl_lite/startup.py): estimator and loss names,
KL options, discounting, group sizes, DAPO's group filter. Names come from the registries, the
KL controller's rule from kl_ctrl.py (the one the controller itself applies)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from verl_lite.algos import ADV_ESTIMATORS, POLICY_LOSSES
from verl_lite.algos.kl import KL_TYPES, is_kl_type
from verl_lite.algos.kl_ctrl import kl_ctrl_problems
from verl_lite.algos.loss_agg import LOSS_AGG_MODES

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig

ARR = "actor_rollout_ref"
FILTER_METRICS = ("seq_reward", "seq_final_reward", "acc", "score")
GROUP_ESTIMATORS = ("grpo", "rloo")  # a baseline from the other responses to the same prompt


def _choices(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    a, alg = cfg.actor_rollout_ref.actor, cfg.algorithm
    choices = [
        (f"{ARR}.actor.loss_agg_mode", a.loss_agg_mode, LOSS_AGG_MODES),
        (f"{ARR}.actor.policy_loss.loss_mode", a.policy_loss.loss_mode, POLICY_LOSSES.names()),
        ("algorithm.adv_estimator", alg.adv_estimator, ADV_ESTIMATORS.names()),
    ]
    if run.critic:
        choices.append(("critic.loss_agg_mode", cfg.critic.loss_agg_mode, LOSS_AGG_MODES))
    problems = [
        f"{key}={value!r} is not one of {list(allowed)}"
        for key, value, allowed in choices
        if value not in allowed
    ]
    if not is_kl_type(a.kl_loss_type):
        problems.append(
            f"{ARR}.actor.kl_loss_type={a.kl_loss_type!r} is not one of {list(KL_TYPES)} (optionally with '+')"
        )
    if not is_kl_type(alg.kl_penalty):
        problems.append(f"algorithm.kl_penalty={alg.kl_penalty!r} is not one of {list(KL_TYPES)}")
    return problems


def check_algorithm(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    alg, n = cfg.algorithm, cfg.actor_rollout_ref.rollout.n
    problems = _choices(cfg, run)
    problems += [
        f"{key}={value} must be in [0, 1]"
        for key, value in (("algorithm.gamma", alg.gamma), ("algorithm.lam", alg.lam))
        if not 0.0 <= value <= 1.0
    ]
    ctrl = alg.kl_ctrl
    problems += kl_ctrl_problems(ctrl.type, ctrl.target_kl, ctrl.horizon)
    if cfg.actor_rollout_ref.actor.clip_ratio_c <= 1.0:
        problems.append(
            f"{ARR}.actor.clip_ratio_c={cfg.actor_rollout_ref.actor.clip_ratio_c} must be > 1 (the dual-clip cap)"
        )
    if alg.adv_estimator in GROUP_ESTIMATORS and n < 2:
        problems.append(
            f"algorithm.adv_estimator={alg.adv_estimator} needs {ARR}.rollout.n >= 2 (a group per prompt), got {n}"
        )
    fg = alg.filter_groups
    if fg.enable and fg.metric not in FILTER_METRICS:
        problems.append(
            f"algorithm.filter_groups.metric={fg.metric!r} is not one of {list(FILTER_METRICS)} "
            "(needed with algorithm.filter_groups.enable=True)"
        )
    if fg.enable and n < 2:
        problems.append(
            f"algorithm.filter_groups.enable=True needs {ARR}.rollout.n >= 2 (groups to compare), got {n}"
        )
    return problems
