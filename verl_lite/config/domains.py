"""Value domains: every value in the config that has one, as one table: a domain declared beside its
field in the schema (config/fields.key, choice sets included), or listed here.

A size must be a positive integer, a rate a finite number in its interval, AdamW's betas two numbers
in [0, 1), a clip range positive, a coefficient finite and not negative, a mode one of its choices.
config/values.py checks every value the run reads against it, once, before anything is derived.

A domain applies only while the run reads its key (config/features.py): `lora_alpha` only with
LoRA on, the critic's sizes only with a critic, a token budget only with dynamic batching, as in
verl, whose scripts leave such keys at "off" values (`lora_alpha=0` with `lora_rank=0`). Nulls of the
keys without a domain are config/nulls.py's.

Rules that relate several keys (batch geometry, lengths against the model) live with the checks of
the component they concern; this table holds only what one value alone can get wrong. Keys whose
rule depends on which algorithm runs are their component's: a policy loss's own keys (clip_ratio_c,
clip_cov_ratio, tau_pos, ...) are checked by its registered spec (algos/), algorithm.kl_ctrl by
algos/kl_ctrl.kl_ctrl_problems (target_kl and horizon matter only for the adaptive controller).
"""

from __future__ import annotations

import dataclasses
import functools

from verl_lite.config.common import FSDP_SECTIONS
from verl_lite.config.fields import (
    BETAS,
    FINITE,
    FOLLOWS_ACTOR,
    FREQ,
    LORA_RANK,
    MAX_SAMPLES,
    MICRO,
    NON_NEG,
    NON_NEG_INT,
    POS,
    POS_INT,
    SHARDS,
    SHARE,
    TOP_K,
    UNIT,
    UNIT_OPEN,
    WARMUP_STEPS,
    Domain,
    _is_int,
)
from verl_lite.config.schema import PPOTrainerConfig

ARR = "actor_rollout_ref"


def _optim(prefix: str) -> dict[str, Domain]:
    return {
        f"{prefix}.lr": POS,
        f"{prefix}.betas": BETAS,
        f"{prefix}.weight_decay": NON_NEG,
        f"{prefix}.lr_warmup_steps": WARMUP_STEPS,
        f"{prefix}.lr_warmup_steps_ratio": UNIT,
        f"{prefix}.min_lr_ratio": UNIT,
        f"{prefix}.num_cycles": POS,
        f"{prefix}.clip_grad": POS,
    }


def _sampling(prefix: str) -> dict[str, Domain]:
    return {
        f"{prefix}.temperature": NON_NEG,
        f"{prefix}.top_k": TOP_K,
        f"{prefix}.top_p": SHARE,
        f"{prefix}.n": POS_INT,
    }


_LISTED: dict[str, Domain] = {
    # data
    "data.train_batch_size": POS_INT,
    "data.val_batch_size": POS_INT.or_null("the whole validation set in one batch"),
    "data.max_prompt_length": POS_INT,
    "data.max_response_length": POS_INT,
    "data.seed": NON_NEG_INT.or_null("a fixed default seed"),
    "data.train_max_samples": MAX_SAMPLES,
    "data.val_max_samples": MAX_SAMPLES,
    "data.gen_batch_size": POS_INT.or_null("data.train_batch_size"),
    # actor
    f"{ARR}.actor.ppo_mini_batch_size": POS_INT,
    f"{ARR}.actor.ppo_micro_batch_size": MICRO,
    f"{ARR}.actor.ppo_micro_batch_size_per_gpu": MICRO,
    f"{ARR}.actor.ppo_max_token_len_per_gpu": POS_INT,
    f"{ARR}.actor.ppo_epochs": POS_INT,
    f"{ARR}.actor.clip_ratio": UNIT_OPEN,
    # > 0, not < 1: CISPO's scripts set clip_ratio_low=10 (no lower bound on the ratio), as verl allows
    f"{ARR}.actor.clip_ratio_low": POS.or_null("clip_ratio"),
    f"{ARR}.actor.clip_ratio_high": POS.or_null("clip_ratio"),
    f"{ARR}.actor.entropy_coeff": NON_NEG,
    f"{ARR}.actor.kl_loss_coef": NON_NEG,
    f"{ARR}.actor.grad_clip": POS,
    f"{ARR}.actor.loss_scale_factor": POS_INT.or_null("the response length of each batch"),
    f"{ARR}.actor.policy_loss.clip_cov_lb": FINITE,
    f"{ARR}.actor.policy_loss.clip_cov_ub": FINITE,
    f"{ARR}.actor.policy_loss.ppo_kl_coef": NON_NEG,
    **_optim(f"{ARR}.actor.optim"),
    # ref and rollout
    f"{ARR}.ref.log_prob_micro_batch_size": MICRO,
    f"{ARR}.ref.log_prob_micro_batch_size_per_gpu": MICRO,
    f"{ARR}.ref.log_prob_max_token_len_per_gpu": POS_INT,
    **_sampling(f"{ARR}.rollout"),
    **_sampling(f"{ARR}.rollout.val_kwargs"),
    f"{ARR}.rollout.prompt_length": POS_INT,
    f"{ARR}.rollout.response_length": POS_INT,
    f"{ARR}.rollout.log_prob_micro_batch_size": MICRO,
    f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu": MICRO,
    f"{ARR}.rollout.log_prob_max_token_len_per_gpu": POS_INT,
    f"{ARR}.rollout.gpu_memory_utilization": SHARE,
    f"{ARR}.rollout.tensor_model_parallel_size": POS_INT,
    f"{ARR}.rollout.max_num_batched_tokens": POS_INT,
    f"{ARR}.rollout.max_model_len": POS_INT.or_null("prompt_length + response_length"),
    f"{ARR}.rollout.max_num_seqs": POS_INT,
    f"{ARR}.rollout.update_weights_bucket_megabytes": POS_INT,
    f"{ARR}.rollout.checkpoint_engine.update_weights_bucket_megabytes": POS_INT,
    f"{ARR}.rollout.seed": NON_NEG_INT,
    f"{ARR}.nccl_timeout": POS_INT,
    f"{ARR}.rollout.cpu_kv_cache_gb": POS,
    **{f"{s}.wrap_policy.min_num_params": NON_NEG_INT for s in FSDP_SECTIONS.values()},
    **{f"{m}.lora_rank": LORA_RANK for m in (f"{ARR}.model", "critic.model")},
    **{f"{m}.lora_alpha": POS for m in (f"{ARR}.model", "critic.model")},
    # critic
    "critic.ppo_mini_batch_size": FOLLOWS_ACTOR,
    "critic.ppo_micro_batch_size": MICRO,
    "critic.ppo_micro_batch_size_per_gpu": FOLLOWS_ACTOR,
    "critic.forward_micro_batch_size": MICRO,
    "critic.forward_micro_batch_size_per_gpu": POS_INT.or_null("ppo_micro_batch_size_per_gpu"),
    "critic.ppo_max_token_len_per_gpu": POS_INT,
    "critic.forward_max_token_len_per_gpu": POS_INT.or_null("ppo_max_token_len_per_gpu"),
    "critic.ppo_epochs": FOLLOWS_ACTOR,
    "critic.cliprange_value": POS,
    "critic.grad_clip": POS,
    **_optim("critic.optim"),
    # reward model and reward function
    "reward_model.micro_batch_size": MICRO,
    "reward_model.micro_batch_size_per_gpu": MICRO,
    "reward_model.forward_max_token_len_per_gpu": POS_INT,
    "reward_model.timeout": POS,
    # algorithm
    "algorithm.gamma": UNIT,
    "algorithm.lam": UNIT,
    "algorithm.kl_ctrl.kl_coef": NON_NEG,
    "algorithm.filter_groups.max_num_gen_batches": Domain(_is_int, "an integer (<= 0: no limit)"),
    # trainer and Ray
    "trainer.nnodes": POS_INT,
    "trainer.n_gpus_per_node": POS_INT,
    "trainer.total_epochs": POS_INT,
    "trainer.total_training_steps": POS_INT.or_null("total_epochs' worth"),
    "trainer.log_val_generations": NON_NEG_INT,
    "trainer.test_freq": FREQ,
    "trainer.save_freq": FREQ,
    "trainer.console_full_freq": FREQ,
    "trainer.dist_timeout_s": POS_INT,
    "trainer.device_memory_gb": POS.or_null("what the workers report"),
    "trainer.max_actor_ckpt_to_keep": POS_INT.or_null("keep all"),
    "trainer.max_critic_ckpt_to_keep": POS_INT.or_null("keep all"),
    "trainer.critic_warmup": NON_NEG_INT,
    "ray_kwargs.ray_init.num_cpus": POS_INT.or_null("all of the machine's"),
    # multi-turn rollouts (agent_loop/): turn limits, tool calls per turn, a tool's text and time
    **{
        f"{ARR}.rollout.multi_turn.{k}": POS_INT.or_null("no limit")
        for k in ("max_assistant_turns", "max_user_turns")
    },
    f"{ARR}.rollout.multi_turn.max_parallel_calls": POS_INT,
    f"{ARR}.rollout.multi_turn.max_tool_response_length": POS_INT,
    f"{ARR}.rollout.multi_turn.tool_call_timeout": POS,
    f"{ARR}.rollout.agent.loop_timeout": POS.or_null("(3 + 2 x tools) x tool_call_timeout"),
    # the memory levers; engine/checks.py checks them against the number of workers
    **{f"{s}.ulysses_sequence_parallel_size": POS_INT for s in (f"{ARR}.actor", f"{ARR}.ref", "critic")},
    **{f"{s}.fsdp_size": SHARDS for s in FSDP_SECTIONS.values()},
}


# Numeric keys of the schema with no domain, and why. tests/config/test_domains.py holds that every
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
    "critic.optim.total_training_steps": "filled in at start-up from the data (trainer/checks.resolve_training_steps; verl does the same)",
}


def _declared(cls: type, prefix: str = "") -> dict[str, Domain]:
    """{key: domain} of every field of the schema that declares one beside itself (config/fields.key)."""
    found: dict[str, Domain] = {}
    instance = cls()
    for f in dataclasses.fields(cls):
        value = getattr(instance, f.name)
        if dataclasses.is_dataclass(value):
            found |= _declared(type(value), f"{prefix}{f.name}.")
        elif f.metadata.get("domain") is not None:
            found[f"{prefix}{f.name}"] = f.metadata["domain"]
    return found


@functools.cache
def domains() -> dict[str, Domain]:
    """Every key's domain: declared beside its field, or listed above."""
    declared = _declared(PPOTrainerConfig)
    assert not set(declared) & set(_LISTED), set(declared) & set(_LISTED)
    return declared | _LISTED


DOMAINS = domains()
