"""Which keys a run reads: each optional feature, the keys only it reads, and the switch that turns it on.

verl reads a feature's keys only when the feature is on: `lora_alpha` only with `lora_rank > 0`, the
critic's keys only when there is a critic, the reference policy's only with a KL term, a token
budget only with dynamic batching (and a micro-batch size only without it). A value such keys hold
while their feature is off changes nothing there, and verl's launch scripts rely on that: they set
every key through shell variables whose defaults are "off" (`LORA_RANK=0 LORA_ALPHA=0`,
`CUSTOM_REWARD_FN_NAME=null`). So a start-up rule about one value (its domain, config/domains.py; its
null, config/nulls.py; its support rule, config/support.py) applies only when `reader(cfg, run)(key)`:
this table is the config's one gate.

A feature's keys are dotted keys or whole sections; its switches are the keys that turn it on (they
are always read). A key covered by several features (the critic's token budget: the critic, and
its dynamic batching) is read when all of them are on. Roles come from `Run` (config/run.py): at the
earliest check, before the roles are worked out, a role's keys count as unread and are checked again
once they are known (verl_lite/preflight.py runs VALUES twice).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verl_lite.config.run import Run

ARR = "actor_rollout_ref"


@dataclass(frozen=True)
class Feature:
    name: str
    keys: tuple[str, ...]  # keys or sections read only while the feature is on
    on: Callable[[Any, Run], bool]  # (the config as built, the run) -> whether it is on
    switches: tuple[str, ...] = ()  # keys under `keys` that turn it on: always read
    by_run: bool = False  # on or off by a role the run decides (config/run.py), not by a key

    def covers(self, key: str) -> bool:
        if key in self.switches:
            return False
        return any(key == k or key.startswith(f"{k}.") for k in self.keys)


def _lora(model) -> bool:
    return (model.lora_rank or 0) > 0 or getattr(model, "lora_adapter_path", None) is not None


def _separate(c) -> bool:
    """verl 0.9's separate_async trainer (config/common.trainer_mode, on a composed tree too)."""
    return bool(c.trainer.use_v1) and c.trainer.v1.trainer_mode == "separate_async"


def _cosine(optim) -> bool:
    return (optim.warmup_style or optim.lr_scheduler_type) == "cosine"  # warmup_style: verl's old name


def _batching(section: str, dynamic: Callable[[Any], bool], budgets, micro) -> tuple[Feature, Feature]:
    """A role's token budgets (read with dynamic batching) and micro-batch sizes (read without)."""
    return (
        Feature(
            f"{section} dynamic batching", tuple(f"{section}.{k}" for k in budgets), lambda c, r: dynamic(c)
        ),
        Feature(
            f"{section} fixed micro-batches",
            tuple(f"{section}.{k}" for k in micro),
            lambda c, r: not dynamic(c),
        ),
    )


def _optim(section: str, optim: Callable[[Any], Any]) -> tuple[Feature, Feature]:
    return (
        Feature(
            f"{section} cosine schedule",
            (f"{section}.min_lr_ratio", f"{section}.num_cycles"),
            lambda c, r: _cosine(optim(c)),
        ),
        Feature(
            f"{section} warmup by ratio",
            (f"{section}.lr_warmup_steps_ratio",),
            lambda c, r: (optim(c).lr_warmup_steps or 0) <= 0,  # engine/optim.num_warmup_steps
        ),
    )


RM_WORKER = (
    "model",
    "micro_batch_size",
    "micro_batch_size_per_gpu",
    "max_length",
    "use_dynamic_bsz",
    "forward_max_token_len_per_gpu",
    "strategy",
    "ulysses_sequence_parallel_size",
    "enable_resource_pool",
    "n_gpus_per_node",
    "nnodes",
    "use_reward_loop",
    "num_workers",
    "rollout",
)
LOG_PROB_MICRO = ("log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu")

FEATURES: tuple[Feature, ...] = (
    Feature("the critic", ("critic",), lambda c, r: r.critic, switches=("critic.enable",), by_run=True),
    Feature("the reference policy", (f"{ARR}.ref",), lambda c, r: r.ref, by_run=True),
    Feature(
        "the reward model",
        tuple(f"reward_model.{k}" for k in RM_WORKER),
        lambda c, r: bool(c.reward_model.enable),
    ),
    Feature(  # verl's reward loop does not read it: only its legacy worker (verl_lite's reward model)
        "the reward model's legacy worker",
        ("reward_model.model.input_tokenizer",),
        lambda c, r: bool(c.reward_model.enable) and not c.reward_model.use_reward_loop,
    ),
    Feature(
        "actor LoRA",
        (f"{ARR}.model.lora_alpha", f"{ARR}.model.target_modules", f"{ARR}.model.exclude_modules"),
        lambda c, r: _lora(c.actor_rollout_ref.model),
    ),
    Feature(
        "critic LoRA",
        ("critic.model.lora_alpha", "critic.model.target_modules", "critic.model.exclude_modules"),
        lambda c, r: _lora(c.critic.model),
    ),
    Feature(
        "the KL loss",
        (f"{ARR}.actor.kl_loss_coef", f"{ARR}.actor.kl_loss_type"),
        lambda c, r: bool(c.actor_rollout_ref.actor.use_kl_loss),
    ),
    Feature(
        "the KL penalty in the reward",
        ("algorithm.kl_ctrl", "algorithm.kl_penalty"),
        lambda c, r: bool(c.algorithm.use_kl_in_reward),
    ),
    *_batching(
        f"{ARR}.actor",
        lambda c: c.actor_rollout_ref.actor.use_dynamic_bsz,
        ("ppo_max_token_len_per_gpu",),
        ("ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu"),
    ),
    *_batching(
        f"{ARR}.rollout",
        lambda c: c.actor_rollout_ref.rollout.log_prob_use_dynamic_bsz,
        ("log_prob_max_token_len_per_gpu",),
        LOG_PROB_MICRO,
    ),
    *_batching(
        f"{ARR}.ref",
        lambda c: c.actor_rollout_ref.ref.log_prob_use_dynamic_bsz,
        ("log_prob_max_token_len_per_gpu",),
        LOG_PROB_MICRO,
    ),
    *_batching(
        "critic",
        lambda c: c.critic.use_dynamic_bsz,
        ("ppo_max_token_len_per_gpu", "forward_max_token_len_per_gpu"),
        (
            "ppo_micro_batch_size",
            "ppo_micro_batch_size_per_gpu",
            "forward_micro_batch_size",
            "forward_micro_batch_size_per_gpu",
        ),
    ),
    *_batching(
        "reward_model",
        lambda c: c.reward_model.use_dynamic_bsz,
        ("forward_max_token_len_per_gpu",),
        ("micro_batch_size", "micro_batch_size_per_gpu"),
    ),
    *_optim(f"{ARR}.actor.optim", lambda c: c.actor_rollout_ref.actor.optim),
    *_optim("critic.optim", lambda c: c.critic.optim),
    Feature(
        "DAPO's dynamic sampling",
        ("algorithm.filter_groups",),
        lambda c, r: bool(c.algorithm.filter_groups.enable),
        switches=("algorithm.filter_groups.enable",),
    ),
    Feature(
        "a custom reward function",
        ("custom_reward_function.name",),
        lambda c, r: bool(c.custom_reward_function.path),
    ),
    Feature("the V1 trainer", ("trainer.v1",), lambda c, r: bool(c.trainer.use_v1)),  # verl: else legacy
    Feature(
        "the V1 async trainers",
        ("trainer.v1.sampler",),
        lambda c, r: c.trainer.v1.trainer_mode != "sync",
    ),
    *(
        Feature(mode, (f"trainer.v1.{mode}",), lambda c, r, m=mode: c.trainer.v1.trainer_mode == m)
        for mode in ("colocate_async", "separate_async")
    ),
    Feature(  # separate_async's: the rollout group's own devices, and its transport
        "the hybrid engine's rollout",
        (f"{ARR}.rollout.nnodes", f"{ARR}.rollout.checkpoint_engine.backend"),
        lambda c, r: not _separate(c),
    ),
    Feature(
        "separate_async's rollout group",
        (f"{ARR}.rollout.n_gpus_per_node",),
        lambda c, r: _separate(c),
    ),
    Feature(
        "separate_async's hybrid rollout switch",
        ("trainer.v1.separate_async.hybrid_rollout",),
        lambda c, r: bool(
            c.trainer.v1.separate_async.hybrid_rollout.get("enable_switch")
        ),  # verl's keys: a dict
        switches=("trainer.v1.separate_async.hybrid_rollout.enable_switch",),
    ),
    Feature(
        "rollout correction",
        ("algorithm.rollout_correction",),
        lambda c, r: _rollout_correction(c.algorithm.rollout_correction),
        switches=tuple(
            f"algorithm.rollout_correction.{k}" for k in ("rollout_is", "rollout_rs", "bypass_mode")
        ),
    ),
    Feature(
        "rollout correction's bypass mode",
        ("algorithm.rollout_correction.loss_type",),
        lambda c, r: (
            c.algorithm.rollout_correction is not None and bool(c.algorithm.rollout_correction.bypass_mode)
        ),
    ),
)


def _rollout_correction(rc) -> bool:
    return rc is not None and (rc.rollout_is is not None or rc.rollout_rs is not None or bool(rc.bypass_mode))


@functools.cache
def features_of(key: str) -> tuple[Feature, ...]:
    return tuple(f for f in FEATURES if f.covers(key))


def reader(cfg, run: Run | None) -> Callable[[str], bool]:
    """Whether the run reads a key, for the keys of one config: every feature that covers it is on,
    each feature's state worked out once. `cfg`: the config as built, or as composed (an OmegaConf
    tree reads the same); `run=None`: before the roles are decided (the config's support table,
    config/support.py), when a role's feature counts as on."""
    on = {f.name: f.on(cfg, run) for f in FEATURES if run is not None or not f.by_run}
    return lambda key: all(on.get(f.name, True) for f in features_of(key))
