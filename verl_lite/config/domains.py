"""Value domains: every number in the config that has one, checked once, before anything is derived.

A size must be a positive integer, a rate a finite number in its interval, AdamW's betas two numbers
in [0, 1), a clip range positive, a coefficient finite and not negative. The table `DOMAINS` maps
each key to its domain; `check_domains` reads the composed config as the user wrote it (before
normalisation fills derived values, so `rollout.response_length=0` is reported instead of being
taken for "unset") and returns one line per value outside its domain, naming key, value and what
is allowed. Hydra already refuses a value of the wrong type (`lr=fast`), but not `lr=nan` or
`lr=-1`, and a wrong value here would otherwise train silently wrong or fail late in a worker.

A domain applies only while the run reads its key (config/features.py): `lora_alpha` only with
LoRA on, the critic's sizes only with a critic, a token budget only with dynamic batching, as in
verl, whose scripts leave such keys at "off" values (`lora_alpha=0` with `lora_rank=0`). Nulls of the
keys without a domain are config/nulls.py's.

A key whose value is a link to another key (`critic.ppo_epochs: ${actor_rollout_ref.actor.ppo_epochs}`)
is not checked when the key it follows is in the table: a bad value is reported once, under the
key the user set. `linked_keys` finds the links in the composed config before it is resolved.

Rules that relate several keys (batch geometry, lengths against the model) live with the checks of
the component they concern; this table holds only what one value alone can get wrong. Keys whose
rule depends on which algorithm runs are their component's: a policy loss's own keys (clip_ratio_c,
clip_cov_ratio, tau_pos, ...) are checked by its registered spec (algos/), algorithm.kl_ctrl by
algos/kl_ctrl.kl_ctrl_problems (target_kl and horizon matter only for the adaptive controller).
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from verl_lite.config.common import FSDP_SECTIONS
from verl_lite.config.features import reads
from verl_lite.config.nulls import check_nulls

if TYPE_CHECKING:
    from verl_lite.config.run import Run

ARR = "actor_rollout_ref"


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class Domain:
    test: Callable[[Any], bool]
    says: str  # "must be <says>"
    nullable: bool = False  # null is allowed (and means what the schema's comment says)

    def holds(self, value) -> bool:
        return (self.nullable and value is None) or (value is not None and self.test(value))

    def or_null(self, meaning: str) -> Domain:
        return Domain(self.test, f"{self.says} or null ({meaning})", nullable=True)


POS_INT = Domain(lambda v: _is_int(v) and v > 0, "a positive integer")
NON_NEG_INT = Domain(lambda v: _is_int(v) and v >= 0, "an integer >= 0")
POS = Domain(lambda v: _is_num(v) and v > 0, "a finite number > 0")
NON_NEG = Domain(lambda v: _is_num(v) and v >= 0, "a finite number >= 0")
UNIT = Domain(lambda v: _is_num(v) and 0 <= v <= 1, "a number in [0, 1]")
UNIT_OPEN = Domain(lambda v: _is_num(v) and 0 < v < 1, "a number in (0, 1)")
SHARE = Domain(lambda v: _is_num(v) and 0 < v <= 1, "a number in (0, 1]")
BETAS = Domain(
    lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and all(_is_num(b) and 0 <= b < 1 for b in v),
    "two numbers in [0, 1), e.g. [0.9, 0.999]",
)
TOP_K = Domain(lambda v: _is_int(v) and v >= -1, "-1 (no top-k) or a positive integer")
WARMUP_STEPS = Domain(lambda v: _is_int(v) and v >= -1, "-1 (use lr_warmup_steps_ratio) or an integer >= 0")
FREQ = Domain(_is_int, "an integer (a step count; <= 0: never)")
MAX_SAMPLES = Domain(lambda v: _is_int(v) and (v == -1 or v > 0), "-1 (all rows) or a positive integer")
FINITE = Domain(_is_num, "a finite number")
LORA_RANK = Domain(lambda v: _is_int(v) and v >= 0, "0 (full fine-tuning) or a positive LoRA rank")


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


MICRO = POS_INT.or_null("unset")
SHARDS = Domain(lambda v: _is_int(v) and (v == -1 or v > 0), "-1 (all ranks) or a positive integer")
FOLLOWS_ACTOR = POS_INT.or_null("the actor's")

DOMAINS: dict[str, Domain] = {
    # data
    "data.train_batch_size": POS_INT,
    "data.val_batch_size": POS_INT.or_null("the whole validation set in one batch"),
    "data.max_prompt_length": POS_INT,
    "data.max_response_length": POS_INT,
    "data.seed": NON_NEG_INT.or_null("a fixed default seed"),
    "data.train_max_samples": MAX_SAMPLES,
    "data.val_max_samples": MAX_SAMPLES,
    "data.gen_batch_size": POS_INT,
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
    "algorithm.rollout_correction.rollout_is_threshold": "algos/rollout_corr.is_problems: it matters only with rollout_is set",
    "algorithm.kl_ctrl.horizon": "algos/kl_ctrl.kl_ctrl_problems: it matters only for the adaptive controller",
    "algorithm.kl_ctrl.target_kl": "algos/kl_ctrl.kl_ctrl_problems: it matters only for the adaptive controller",
    f"{ARR}.actor.optim.total_training_steps": "filled in at start-up from the data (trainer/checks.resolve_training_steps; verl does the same)",
    "critic.optim.total_training_steps": "filled in at start-up from the data (trainer/checks.resolve_training_steps; verl does the same)",
}


def lookup(cfg, key: str):
    """The value at dotted `key` of a dataclass (or dict) tree; KeyError when a part is missing."""
    node = cfg
    for part in key.split("."):
        if isinstance(node, dict):
            node = node[part]
        elif hasattr(node, part):
            node = getattr(node, part)
        else:
            raise KeyError(key)
    return node


_LINK = re.compile(r"^\$\{(\.*)([\w.]+)\}$")


def _target(prefix: str, dots: str, name: str) -> str:
    """The absolute key of a link: `${a.b}` is absolute; `${.b}` is in the same node, `${..b}` above it."""
    if not dots:
        return name
    parts = prefix.rstrip(".").split(".") if prefix else []
    base = parts[: len(parts) - (len(dots) - 1)]
    return ".".join([*base, name])


def linked_keys(raw: dict, prefix: str = "") -> dict[str, str]:
    """{key: the key it links to} for every value of the unresolved config (a nested dict, as
    OmegaConf.to_container(cfg, resolve=False) gives it) that is exactly `${other.key}` (or relative)."""
    links = {}
    for name, value in raw.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            links |= linked_keys(value, key + ".")
        elif isinstance(value, str) and (m := _LINK.match(value)):
            links[key] = _target(prefix, m.group(1), m.group(2))
    return links


def check_domains(
    cfg, domains: dict[str, Domain] = DOMAINS, links: dict[str, str] | None = None, run: Run | None = None
) -> list[str]:
    """One line per value outside its domain: `<key>=<value> must be <domain>`, for the keys the run
    reads (config/features.py; `run=None`: every key). A key in `links` that follows a key of the
    table is left to that key, when that key is read."""

    def read(key: str) -> bool:
        return run is None or reads(cfg, run, key)

    problems = []
    for key, domain in domains.items():
        target = (links or {}).get(key)
        if not read(key) or (target in domains and read(target)):
            continue
        value = lookup(cfg, key)
        if not domain.holds(value):
            problems.append(f"{key}={_show(value)} must be {domain.says}")
    return problems


def _show(value) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return "null" if value is None else str(value) if not isinstance(value, str) else repr(value)


def check_values(cfg, run: Run) -> list[str]:
    """The start-up step (verl_lite/preflight.py VALUES): every domain and every null of the keys the
    run reads, a linked key named once."""
    return check_domains(cfg, links=run.links, run=run) + check_nulls(cfg, run)
