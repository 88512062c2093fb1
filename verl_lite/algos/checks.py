"""The algorithm's start-up check (registered in verl_lite/preflight.py): the advantage estimator and
the policy loss by their registered specs (algos/registry.py: names, group sizes, required keys,
value checks), loss aggregation, KL options, discounting, DAPO's group filter, rollout correction's
options when it is on. The KL controller's rule is kl_ctrl.py's, the rejection options' parser is the
one rejection itself uses (rollout_rs.py)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from verl_lite.algos import ADV_ESTIMATORS, POLICY_LOSSES
from verl_lite.algos.kl_ctrl import kl_ctrl_problems
from verl_lite.algos.registry import select
from verl_lite.algos.rollout_corr import is_problems
from verl_lite.algos.rollout_rs import rs_problems

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig

ARR = "actor_rollout_ref"
log = logging.getLogger("verl_lite.algos")


def _estimator(cfg: PPOTrainerConfig) -> list[str]:
    name, n = cfg.algorithm.adv_estimator, cfg.actor_rollout_ref.rollout.n
    problem = ADV_ESTIMATORS.problem(name)
    if problem:
        return [problem]
    spec, problems = ADV_ESTIMATORS.spec(name), []
    if n < spec.min_group_size:
        problems.append(
            f"algorithm.adv_estimator={name} needs {ARR}.rollout.n >= {spec.min_group_size} ({spec.why_group}), got {n}"
        )
    elif (
        n == 1 and spec.group_of_one
    ):  # verl runs it; its CI does (run_function_reward.sh, ADV_ESTIMATOR=grpo)
        log.warning(
            "algorithm.adv_estimator=%s with %s.rollout.n=1: each prompt's group has one response, so it gets "
            "%s (verl's rule); a group baseline needs rollout.n >= 2",
            name,
            ARR,
            spec.group_of_one,
        )
    if spec.needs_critic and cfg.critic.enable is False:
        problems.append(
            f"algorithm.adv_estimator={name} needs a critic (its values), but critic.enable=False; "
            "set critic.enable=True (or leave it null) or choose an estimator without a critic"
        )
    for key, wanted in spec.requires:
        value = select(cfg, key)
        if value != wanted:
            problems.append(f"algorithm.adv_estimator={name} needs {key}={wanted}, got {value}")
    problems += spec.problems(cfg) if spec.problems else []
    return problems + ADV_ESTIMATORS.check_values(spec, cfg)


def _policy_loss(actor) -> list[str]:
    mode = actor.policy_loss.loss_mode
    problem = POLICY_LOSSES.problem(mode)
    if problem:
        return [problem]
    spec = POLICY_LOSSES.spec(mode)
    if spec.agg_mode and spec.agg_mode != actor.loss_agg_mode:
        log.info(
            "%s.actor.policy_loss.loss_mode=%s aggregates pg_loss %s, as in verl; loss_agg_mode=%s applies "
            "to the entropy and KL terms",
            ARR,
            mode,
            spec.agg_mode,
            actor.loss_agg_mode,
        )
    if not spec.split_invariant:
        log.info(
            "%s.actor.policy_loss.loss_mode=%s picks its tokens within each micro-batch, as in verl: its "
            "update depends on the micro-batch size and the number of workers",
            ARR,
            mode,
        )
    return list(POLICY_LOSSES.check_values(spec, actor))


def _options(cfg: PPOTrainerConfig) -> list[str]:
    """The KL terms (their types' and loss_agg_mode's choices, gamma and lam: config/values.py)."""
    a, alg = cfg.actor_rollout_ref.actor, cfg.algorithm
    if not alg.use_kl_in_reward:
        return []
    if a.use_kl_loss:  # verl says so too: both apply, not one instead of the other
        log.info(
            "both KL terms apply, as in verl: algorithm.use_kl_in_reward=True subtracts kl_ctrl.kl_coef x KL "
            "from the rewards and %s.actor.use_kl_loss=True adds kl_loss_coef x KL to the actor's loss",
            ARR,
        )
    return kl_ctrl_problems(alg.kl_ctrl.type, alg.kl_ctrl.target_kl, alg.kl_ctrl.horizon)


def _filter_groups(cfg: PPOTrainerConfig) -> list[str]:
    fg, n = cfg.algorithm.filter_groups, cfg.actor_rollout_ref.rollout.n  # metric's choices: config/values.py
    if fg.enable and n == 1:  # verl keeps a group of one (its DAPO trainer: std > 0 or len == 1)
        log.warning(
            "algorithm.filter_groups.enable=True with %s.rollout.n=1: a group of one response is always "
            "kept (verl's rule), so nothing is filtered; dynamic sampling needs rollout.n >= 2",
            ARR,
        )
    return []


def _rollout_correction(cfg: PPOTrainerConfig) -> list[str]:
    """algorithm.rollout_correction: each option's values where that option is on."""
    rc, key = cfg.algorithm.rollout_correction, "algorithm.rollout_correction"
    problems = is_problems(rc.rollout_is, rc.rollout_is_threshold)
    problems += rs_problems(rc.rollout_rs, rc.rollout_rs_threshold)
    mode = cfg.actor_rollout_ref.actor.policy_loss.loss_mode
    if rc.bypass_mode and mode != "vanilla":
        problems.append(
            f"{key}.bypass_mode=True replaces {ARR}.actor.policy_loss.loss_mode by its own loss ({key}.loss_type: "
            f"ppo_clip is vanilla's against the rollout's log-probs), so loss_mode={mode} would not run; "
            "set loss_mode=vanilla or bypass_mode=False"
        )
    return problems


def check_algorithm(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    return (
        _estimator(cfg)
        + _policy_loss(cfg.actor_rollout_ref.actor)
        + _options(cfg)
        + _filter_groups(cfg)
        + _rollout_correction(cfg)
    )
