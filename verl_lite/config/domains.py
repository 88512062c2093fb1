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

# every key's domain, as declared beside its field
DOMAINS: dict[str, Domain] = {
    k: f.metadata["domain"] for k, f in FIELDS if f.metadata.get("domain") is not None
}
