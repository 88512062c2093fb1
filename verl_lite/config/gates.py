"""The features that read some keys only while they are on: each a gate, declared beside the fields
it covers (config/fields.key's `gate`; a section's gate covers every key under it).

verl reads a feature's keys only when the feature is on: `lora_alpha` only with `lora_rank > 0`, the
critic's keys only when there is a critic, the reference policy's only with a KL term, a token
budget only with dynamic batching (and a micro-batch size only without it). A value such keys hold
while their feature is off changes nothing there, and verl's launch scripts rely on that: they set
every key through shell variables whose defaults are "off" (`LORA_RANK=0 LORA_ALPHA=0`,
`CUSTOM_REWARD_FN_NAME=null`). So a start-up rule about one value (its domain, its null, its support
rule) applies only while the run reads the key (config/features.reader). A gate's `on` sees the
section holding the gated field (so OptimConfig's cosine keys are gated once for the actor and the
critic), the whole config (as built, or as composed: an OmegaConf tree reads the same) and the run.
Imports nothing of config/: the schema modules use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Gate:
    name: str  # how docs/config.md names the feature ("with <name> on")
    on: Callable[[Any, Any, Any], bool]  # (the section holding the field, the config, the run) -> on
    switches: tuple[str, ...] = ()  # keys of a gated section that turn it on: always read
    by_run: bool = False  # on or off by a role the run decides (config/run.py), not by a key


def _separate(c) -> bool:
    """verl 0.9's separate_async trainer (config/common.trainer_mode, on a composed tree too)."""
    return bool(c.trainer.use_v1) and c.trainer.v1.trainer_mode == "separate_async"


def _rollout_correction(rc) -> bool:
    return rc is not None and (rc.rollout_is is not None or rc.rollout_rs is not None or bool(rc.bypass_mode))


CRITIC = Gate("the critic", lambda s, c, r: r.critic, switches=("enable",), by_run=True)
REF = Gate("the reference policy", lambda s, c, r: r.ref, by_run=True)
REWARD_MODEL = Gate("the reward model", lambda rm, c, r: bool(rm.enable))
# verl's reward loop does not read it: only its legacy worker (verl_lite's reward model)
RM_LEGACY = Gate(
    "the reward model's legacy worker",
    lambda m, c, r: bool(c.reward_model.enable) and not c.reward_model.use_reward_loop,
)
LORA = Gate(
    "LoRA", lambda m, c, r: (m.lora_rank or 0) > 0 or getattr(m, "lora_adapter_path", None) is not None
)
KL_LOSS = Gate("the KL loss", lambda a, c, r: bool(a.use_kl_loss))
KL_IN_REWARD = Gate("the KL penalty in the reward", lambda alg, c, r: bool(alg.use_kl_in_reward))
DYNAMIC = Gate("dynamic batching", lambda s, c, r: bool(s.use_dynamic_bsz))
FIXED = Gate("fixed micro-batches", lambda s, c, r: not s.use_dynamic_bsz)
LOG_PROB_DYNAMIC = Gate("dynamic batching", lambda s, c, r: bool(s.log_prob_use_dynamic_bsz))
LOG_PROB_FIXED = Gate("fixed micro-batches", lambda s, c, r: not s.log_prob_use_dynamic_bsz)
COSINE = Gate("the cosine schedule", lambda o, c, r: (o.warmup_style or o.lr_scheduler_type) == "cosine")
WARMUP_RATIO = Gate("warm-up by ratio", lambda o, c, r: (o.lr_warmup_steps or 0) <= 0)  # engine/optim
DAPO = Gate("DAPO's dynamic sampling", lambda alg, c, r: bool(alg.filter_groups.enable), switches=("enable",))
CUSTOM_REWARD = Gate("a custom reward function", lambda f, c, r: bool(f.path))
V1 = Gate("the V1 trainer", lambda t, c, r: bool(t.use_v1))  # verl: else its legacy trainer
# the replay buffer's keys (trainer.v1.sampler.*): the ones each mode's sampling reads
V1_ASYNC = Gate("the V1 async trainers", lambda s, c, r: c.trainer.v1.trainer_mode != "sync")
V1_SYNC = Gate("the V1 sync trainer", lambda s, c, r: c.trainer.v1.trainer_mode == "sync")
COLOCATE = Gate("colocate_async", lambda v1, c, r: v1.trainer_mode == "colocate_async")
SEPARATE = Gate("separate_async", lambda v1, c, r: v1.trainer_mode == "separate_async")
# separate_async's: the rollout group's own devices, and its transport
HYBRID_ROLLOUT = Gate("the hybrid engine's rollout", lambda s, c, r: not _separate(c))
ROLLOUT_GROUP = Gate("separate_async's rollout group", lambda s, c, r: _separate(c))
ROLLOUT_CORRECTION = Gate(
    "rollout correction",
    lambda alg, c, r: _rollout_correction(alg.rollout_correction),
    switches=("rollout_is", "rollout_rs", "bypass_mode"),
)
BYPASS = Gate("rollout correction's bypass mode", lambda rc, c, r: bool(rc.bypass_mode))
