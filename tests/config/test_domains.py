"""The value-domain table: every key it names exists, the schema's defaults lie inside, and each kind of
domain refuses what it should (NaN, infinities, negatives, a one-element betas)."""

import math

import pytest

from verl_lite.config.compose import load_config
from verl_lite.config.domains import DOMAINS
from verl_lite.config.fields import BETAS, POS, POS_INT, UNIT_OPEN
from verl_lite.config.keys import lookup
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.config.values import check_values

ARR = "actor_rollout_ref"


def test_every_key_in_the_table_exists_in_the_schema():
    cfg = PPOTrainerConfig()
    for key in DOMAINS:
        lookup(cfg, key)  # KeyError names a key the schema lacks


@pytest.mark.parametrize("config_name", ["ppo_trainer", "demo"])
def test_the_composed_defaults_are_inside_their_domains(config_name):
    from verl_lite.roles import run_of

    cfg = load_config([], config_name)
    assert check_values(cfg, run_of(cfg, 0)) == []


@pytest.mark.parametrize(
    "domain, good, bad",
    [
        (POS, [1e-6, 3], [0, -1e-6, math.nan, math.inf, None, True]),
        (POS_INT, [1, 64], [0, -3, 2.5, None, False]),
        (UNIT_OPEN, [0.2, 1e-4], [0, 1, -0.2, math.nan]),
        (BETAS, [[0.9, 0.999], (0.0, 0.5)], [[0.9], [0.9, 1.0], [0.9, math.nan], 0.9, [0.9, 0.99, 0.9]]),
    ],
    ids=["positive", "positive_int", "open_unit", "betas"],
)
def test_domains_accept_and_refuse(domain, good, bad):
    assert all(domain.holds(v) for v in good), good
    assert not any(domain.holds(v) for v in bad), [v for v in bad if domain.holds(v)]
    assert domain.or_null("x").holds(None)


def test_problems_name_key_value_and_domain():
    cfg = load_config([], "demo")
    cfg.actor_rollout_ref.actor.optim.betas = [0.9]
    cfg.critic.optim.lr = math.nan
    cfg.actor_rollout_ref.rollout.response_length = 0
    cfg.algorithm.filter_groups.metric = "acc"  # run=None reads every key, DAPO's too
    assert check_values(cfg) == [
        "actor_rollout_ref.actor.optim.betas=[0.9] must be two numbers in [0, 1), e.g. [0.9, 0.999]",
        "actor_rollout_ref.rollout.response_length=0 must be a positive integer",
        "critic.optim.lr=nan must be a finite number > 0",
    ]


def test_a_bad_value_is_named_once_where_it_was_set():
    from verl_lite.config.compose import compose_config, to_config
    from verl_lite.config.keys import links_in

    bad = ["actor_rollout_ref.actor.ppo_epochs=0", "critic.ppo_micro_batch_size=0"]
    raw = compose_config([*bad, "algorithm.filter_groups.metric=acc"], "demo")  # every key is read
    links = links_in(raw)
    assert links["critic.forward_micro_batch_size_per_gpu"] == "critic.ppo_micro_batch_size_per_gpu"
    assert links["critic.ppo_epochs"] == "actor_rollout_ref.actor.ppo_epochs"
    assert check_values(to_config(raw), links=links) == [
        "actor_rollout_ref.actor.ppo_epochs=0 must be a positive integer",
        "critic.ppo_micro_batch_size=0 must be a positive integer or null (unset)",
    ]


def _numeric_keys(cls, prefix=""):
    """Every key of the schema whose type is a number or a list of numbers, optional or not."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kinds = set(typing.get_args(hints[f.name]) or (hints[f.name],))
        kinds |= {a for k in kinds for a in typing.get_args(k)}  # list[float] -> float
        section = [k for k in kinds if dataclasses.is_dataclass(k)]
        if section:
            yield from _numeric_keys(section[0], f"{prefix}{f.name}.")
        elif kinds & {int, float}:
            yield f"{prefix}{f.name}"


# Numeric keys of the schema with no domain, and why. The test below holds that every
# numeric key is in DOMAINS, here, or limited by the support table (config/support.py) to values
# that change nothing here.
NO_DOMAIN = {
    f"{ARR}.actor.clip_ratio_c": "checked by the policy loss that reads it (its registered spec, algos/), only when that loss_mode runs",
    f"{ARR}.actor.tau_pos": "checked by the policy loss that reads it (its registered spec, algos/), only when that loss_mode runs",
    f"{ARR}.actor.tau_neg": "checked by the policy loss that reads it (its registered spec, algos/), only when that loss_mode runs",
    f"{ARR}.actor.policy_loss.clip_cov_ratio": "checked by the policy loss that reads it (its registered spec, algos/), only when that loss_mode runs",
    f"{ARR}.actor.policy_loss.kl_cov_ratio": "checked by the policy loss that reads it (its registered spec, algos/), only when that loss_mode runs",
    f"{ARR}.actor.policy_loss.dro_beta": "checked by the policy loss that reads it (its registered spec, algos/), only when that loss_mode runs",
    "algorithm.gdpo_reward_weights": "algos/gdpo.config_problems: one weight per gdpo_reward_keys entry, only when adv_estimator=gdpo",
    "algorithm.rollout_correction.rollout_is_threshold": "algos/rollout_corr.is_problems: it matters only with rollout_is set",
    "algorithm.kl_ctrl.horizon": "algos/kl_ctrl.kl_ctrl_problems: it matters only for the adaptive controller",
    "algorithm.kl_ctrl.target_kl": "algos/kl_ctrl.kl_ctrl_problems: it matters only for the adaptive controller",
    f"{ARR}.actor.optim.total_training_steps": "filled in at start-up from the data (trainer/checks.resolve_training_steps; verl does the same)",
    f"{ARR}.rollout.n_gpus_per_node": "read only under separate_async, where trainer/checks._separate_async wants at least 1 (and, on one GPU node, room beside the trainer's)",
    "critic.optim.total_training_steps": "filled in at start-up from the data (trainer/checks.resolve_training_steps; verl does the same)",
}


def test_every_numeric_key_has_a_domain_or_a_reason_not_to():
    """The class, not the cases: a number the schema takes is checked, or it is only accepted at values
    that change nothing (the support table), or NO_DOMAIN says why not. A new key must choose."""
    from verl_lite.config.support import rule_for

    keys = list(_numeric_keys(PPOTrainerConfig))
    assert "actor_rollout_ref.actor.optim.betas" in keys and "actor_rollout_ref.rollout.max_model_len" in keys
    unchecked = [k for k in keys if k not in DOMAINS and k not in NO_DOMAIN and rule_for(k) is None]
    assert unchecked == [], f"numeric keys with no domain: add them to DOMAINS or NO_DOMAIN: {unchecked}"
    assert not set(NO_DOMAIN) & set(DOMAINS)


def test_lora_rank_and_alpha_domains():
    problems = check_values(
        load_config(
            [
                f"{ARR}.model.lora_rank=-1",
                "critic.model.lora_rank=-2",
                "critic.model.lora_alpha=0",
                "algorithm.filter_groups.metric=acc",  # every key is read
            ],
            "demo",
        )
    )
    assert problems == [
        f"{ARR}.model.lora_rank=-1 must be 0 (full fine-tuning) or a positive LoRA rank",
        "critic.model.lora_rank=-2 must be 0 (full fine-tuning) or a positive LoRA rank",
        "critic.model.lora_alpha=0 must be a finite number > 0",
    ]


# (the feature off, the feature on, a value outside the key's domain): verl reads the key only when its
# feature is on, and its scripts leave it at "off" values meanwhile (run_function_reward.sh:
# LORA_ALPHA=${LORA_RANK}, so lora_alpha=0 while lora_rank=0)
FEATURES = [
    ([f"{ARR}.model.lora_rank=0"], [f"{ARR}.model.lora_rank=8"], f"{ARR}.model.lora_alpha=0"),
    (["algorithm.adv_estimator=grpo"], ["algorithm.adv_estimator=gae"], "critic.cliprange_value=-0.5"),
    (
        ["algorithm.adv_estimator=gae", "critic.model.lora_rank=0"],
        ["algorithm.adv_estimator=gae", "critic.model.lora_rank=4"],
        "critic.model.lora_alpha=0",
    ),
    ([f"{ARR}.actor.use_kl_loss=False"], [f"{ARR}.actor.use_kl_loss=True"], f"{ARR}.actor.kl_loss_coef=-1"),
    (
        ["algorithm.use_kl_in_reward=False"],
        ["algorithm.use_kl_in_reward=True"],
        "algorithm.kl_ctrl.kl_coef=-1",
    ),
    (
        [f"{ARR}.actor.use_kl_loss=False"],
        [f"{ARR}.actor.use_kl_loss=True"],
        f"{ARR}.ref.log_prob_micro_batch_size_per_gpu=0",
    ),
    (
        [f"{ARR}.actor.use_dynamic_bsz=False"],
        [f"{ARR}.actor.use_dynamic_bsz=True"],
        f"{ARR}.actor.ppo_max_token_len_per_gpu=0",
    ),
    (
        [f"{ARR}.actor.use_dynamic_bsz=True"],
        [f"{ARR}.actor.use_dynamic_bsz=False"],
        f"{ARR}.actor.ppo_micro_batch_size_per_gpu=0",
    ),
    (
        [f"{ARR}.rollout.log_prob_use_dynamic_bsz=False"],
        [f"{ARR}.rollout.log_prob_use_dynamic_bsz=True"],
        f"{ARR}.rollout.log_prob_max_token_len_per_gpu=0",
    ),
    (["reward_model.enable=False"], ["reward_model.enable=True"], "reward_model.micro_batch_size_per_gpu=0"),
    (
        [f"{ARR}.actor.optim.lr_scheduler_type=constant"],
        [f"{ARR}.actor.optim.lr_scheduler_type=cosine"],
        f"{ARR}.actor.optim.num_cycles=0",
    ),
]


def _values_problems(overrides: list[str]) -> list[str]:
    from verl_lite.config.compose import load_config
    from verl_lite.roles import run_of

    cfg = load_config(overrides, "demo")
    return check_values(cfg, run_of(cfg, 0))


@pytest.mark.parametrize("off, on, bad", FEATURES, ids=[bad.split("=")[0] for _, _, bad in FEATURES])
def test_a_domain_applies_only_while_its_feature_is_on(off, on, bad):
    key = bad.split("=")[0]
    assert _values_problems([*off, bad]) == []
    (problem,) = _values_problems([*on, bad])
    assert problem.startswith(f"{key}=") and " must be " in problem, problem


def test_verls_main_ci_script_with_lora_off_passes_its_values():
    """run_function_reward.sh in its default mode: LORA_RANK=0, LORA_ALPHA=${LORA_RANK}."""
    assert _values_problems([f"{ARR}.model.lora_rank=0", f"{ARR}.model.lora_alpha=0"]) == []
