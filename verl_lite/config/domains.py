"""Value domains: every value in the config that has one, as one table read from the schema, where
each is declared beside its field (config/fields.key, choice sets included; a class used for
several sections, such as OptimConfig or FSDPConfig, declares it once for all of them).

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

from verl_lite.config.fields import Domain
from verl_lite.config.schema import FIELDS

ARR = "actor_rollout_ref"


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
    f"{ARR}.rollout.n_gpus_per_node": "read only under separate_async, where trainer/checks._separate_async wants at least 1 (and, on one GPU node, room beside the trainer's)",
    "critic.optim.total_training_steps": "filled in at start-up from the data (trainer/checks.resolve_training_steps; verl does the same)",
}


# every key's domain, as declared beside its field
DOMAINS: dict[str, Domain] = {
    k: f.metadata["domain"] for k, f in FIELDS if f.metadata.get("domain") is not None
}
