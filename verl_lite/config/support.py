"""What verl_lite does with each of verl's keys it does not implement in full: one table, read from
the rules declared beside the schema's fields (config/fields.key's `rule`) and, for verl 0.9.1's keys
the dataclasses do not declare (config/verl_keys.py), from RULES below.

Every key of verl's composed ppo_trainer config exists in the schema. A key is in one of three
classes:
  - implemented: verl's meaning. Every key without a rule.
  - accepted at the values that change nothing here (a profiler setting, torch.compile, an ignored
    multi-turn option, ...): a rule with `note`, said once in the log when set away from its default.
  - refused at any other value: `<key>=<value> is not supported by verl_lite: <instead>`, before Ray.
A rule covers one key or a whole section; a rule on a key beats its section's. A key of verl 0.9.1's
that the dataclasses do not declare and no rule covers is accepted at verl's default only (its
feature is not in verl_lite). A rule applies only while the run reads its key (config/features.py,
the same gate the value domains use), as verl reads the key only then (the reward model's worker keys
only with reward_model.enable; input_tokenizer only where verl's legacy worker reads it, not under its
reward loop), so a script that leaves an unused key at any value is not refused for it; a role decided
later (the critic, the reference) counts as read. Un-refusing a key (its feature landed) is deleting
its rule. A key whose default links another key (`${...}`) and was not set is judged through the key
it follows, unless nothing governs that one.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, replace

from omegaconf import DictConfig, OmegaConf

from verl_lite.config import dialects, keys, verl_keys
from verl_lite.config.common import format_value
from verl_lite.config.features import gates_of, reader
from verl_lite.config.fields import ANY, DEFAULT, FOLLOWS, Rule
from verl_lite.config.schema import FIELDS

log = logging.getLogger("verl_lite.config")

ARR = "actor_rollout_ref"
NO_PROFILER = "verl_lite has no profiler integration: nothing is recorded"
PROFILERS = (f"{ARR}.actor.profiler", f"{ARR}.ref.profiler", f"{ARR}.rollout.profiler", "critic.profiler")
ROLES = (f"{ARR}.actor", "critic")
MTP = "multi-token prediction is not available"

# verl 0.9.1's keys the dataclasses do not declare (verl's features verl_lite does not have): what
# verl_lite does with those it does more with than accept at verl's default
RULES: list[Rule] = [
    *[Rule(p, ANY, note=NO_PROFILER) for p in (*PROFILERS, "global_profiler")],
    *[Rule(f"{s}.optim.optimizer_impl", ("torch.optim",), instead="only torch.optim.AdamW") for s in ROLES],
    *[
        Rule(f"{s}.optim.override_optimizer_config", instead="set the optimizer's lr, betas and weight_decay")
        for s in ROLES
    ],
    *[
        Rule(
            f"{s}.checkpoint.async_save",
            ANY,
            note="verl saves FSDP checkpoints synchronously too (async: Megatron only)",
        )
        for s in ROLES
    ],
    *[Rule(f"{s}.data_loader_seed", ANY) for s in ROLES],
    *[
        Rule(f"{s}.use_torch_compile", ANY, note="verl_lite does not torch.compile kernels (same math)")
        for s in (f"{ARR}.actor", f"{ARR}.ref")
    ],
    # actor, model
    Rule(f"{ARR}.actor.freeze_vision_tower", instead="vision-language models are not supported"),
    Rule(f"{ARR}.actor.calculate_entropy", ANY, note="verl_lite always computes the entropy (actor/entropy)"),
    Rule(f"{ARR}.actor.use_prefix_grouper", instead="every response runs its own forward (same math)"),
    Rule(
        f"{ARR}.model.hf_config_path",
        instead=f"keep config.json in {ARR}.model.path (or use model.override_config)",
    ),
    Rule(f"{ARR}.model.use_liger", instead="Liger kernels are not available"),
    Rule(f"{ARR}.model.fused_kernel_options", ANY),
    Rule(f"{ARR}.model.mtp.enable", instead=MTP),
    Rule(f"{ARR}.model.mtp", ANY),
    Rule(f"{ARR}.hybrid_engine", (True,), instead="the actor and its rollout always share each worker"),
    # rollout
    Rule(
        f"{ARR}.rollout.cudagraph_capture_sizes", ANY, note="vLLM captures its own default sizes (speed only)"
    ),
    Rule(
        f"{ARR}.rollout.data_parallel_size",
        instead="one vLLM engine per TP group; scale with trainer.n_gpus_per_node",
    ),
    Rule(f"{ARR}.rollout.expert_parallel_size", instead="expert parallelism is not available"),
    Rule(f"{ARR}.rollout.pipeline_model_parallel_size", instead="use tensor_model_parallel_size"),
    Rule(f"{ARR}.rollout.scheduling_policy", instead="vLLM schedules first come, first served"),
    Rule(f"{ARR}.rollout.over_sample_rate", instead="every request of a step runs to completion"),
    Rule(f"{ARR}.rollout.multi_stage_wake_up", ANY, note="SGLang only in verl; no effect on vLLM"),
    Rule(f"{ARR}.rollout.prometheus.enable", instead="there is no rollout server to export metrics from"),
    Rule(f"{ARR}.rollout.prometheus", ANY),
    Rule(
        f"{ARR}.rollout.multi_turn.use_inference_chat_template",
        (False,),
        instead="each turn continues from the sampled token ids (token-in / token-out); re-templating the "
        "conversation would train other tokens than the policy sampled",
    ),
    Rule(
        f"{ARR}.rollout.multi_turn.num_repeat_rollouts",
        instead="only CollabLLM's recipe agent loop reads it (repeated user-simulator rollouts per turn); "
        "verl_lite's agent loop has no such step: use rollout.n for more samples per prompt",
    ),
    Rule(f"{ARR}.rollout.agent.custom_async_server", instead="generation runs in the hybrid engine"),
    Rule(f"{ARR}.rollout.enable_rollout_routing_replay", instead="MoE routing replay is not available"),
    Rule(f"{ARR}.rollout.quantization_config_file", instead="the rollout runs unquantized weights"),
    # data
    *[
        Rule(f"data.{k}", ANY)
        for k in (
            "return_raw_input_ids",
            "return_full_prompt",
            "dataloader_num_workers",
            "image_patch_size",
            "image_key",
            "video_key",
            "return_multi_modal_inputs",
            "filter_overlong_prompts_workers",
        )
    ],
    Rule("data.validation_shuffle", ANY, note="validation metrics are means over the whole set: no effect"),
    Rule("data.custom_cls", instead="datasets are verl's RLHF parquet layout (data.train_files)"),
    # algorithm, trainer, the V1 trainer's
    Rule("algorithm.use_pf_ppo", instead="policy-filtered PPO is not available"),
    Rule("algorithm.pf_ppo", ANY),
    Rule("trainer.esi_redundant_time", ANY),
    Rule("trainer.default_hdfs_dir", instead="checkpoints go to trainer.default_local_dir"),
    Rule("trainer.ray_wait_register_center_timeout", ANY),
    Rule(
        "trainer.v1.separate_async.hybrid_rollout",
        ANY,
        note="read only with hybrid_rollout.enable_switch, which is refused: no effect",
    ),
    Rule(
        "trainer.v1.separate_async.hybrid_rollout.enable_switch",
        instead="lending the trainer's devices to the rollout while it would wait is not in verl_lite: "
        "the rollout group generates on its own devices (actor_rollout_ref.rollout.nnodes x n_gpus_per_node); "
        "leave it False",
    ),
    Rule(  # verl 0.9's V1 async trainers require it (their launch scripts set it); it moves data, not math
        "transfer_queue",
        ANY,
        note="verl_lite moves batches through Ray's object store and keeps colocate_async's replay buffer "
        "on the driver: verl's TransferQueue settings change nothing here",
    ),
    Rule(
        "trainer.v1.sampler.custom_sampler",
        instead="the replay buffer is verl's ReplayBufferAsync (trainer/colocate_async.py); a sampler of "
        "one's own is not loaded",
    ),
    Rule("trainer.v1.sampler.sampler_kwargs", instead="there is no custom sampler to pass them to"),
]


def _rules_by_key() -> dict[str, Rule]:
    """RULES and the rules declared beside the schema's fields (their key filled in); one per key."""
    declared = [replace(f.metadata["rule"], key=k) for k, f in FIELDS if f.metadata.get("rule") is not None]
    found: dict[str, Rule] = {}
    for rule in [*RULES, *declared]:
        if rule.key in found:
            raise ValueError(f"support.py: two rules for {rule.key}")
        found[rule.key] = rule
    return found


BY_KEY = _rules_by_key()


def rule_for(key: str) -> Rule | None:
    """The most specific rule covering `key` (its own, else its closest section's); for a key of verl
    0.9.1's the schema's dataclasses do not declare (config/verl_keys.py), else its default only."""
    parts = key.split(".")
    for end in range(len(parts), 0, -1):
        rule = BY_KEY.get(".".join(parts[:end]))
        if rule is not None:
            return rule
    return _added_rule(key) if key in keys.added_keys() else None


@functools.cache
def _added_rule(key: str) -> Rule:
    """verl 0.9.1's key the dataclasses lack: accepted at its default here (a link: the linked value;
    verl 0.7's spelling of a held key, which verl 0.9.1 keeps as a null key: null too, as unset)."""
    default = keys.added_keys()[key]
    target = keys.link_target(default, key)
    spelled = dialects.spelling(key)
    if spelled is not None and target is not None:  # another spelling of a held key
        legacy = spelled.verl09 != key and verl_keys.facts()[0].get(key, "") is None
        unset = (None,) if legacy else ()  # verl 0.9.1 keeps verl 0.7's spellings as null keys: unset
        return Rule(
            key,
            FOLLOWS,
            instead=f"its value is {target}'s: set {key} on the command line or {target}",
            also=unset,
        )
    shown = format_value(default) if target is None else f"{target}'s value"
    instead = f"verl 0.9's {verl_keys.feature(key)} is not in verl_lite; leave it at {shown}"
    return Rule(key, DEFAULT if target is None else FOLLOWS, instead=instead)


@dataclass(frozen=True)
class Values:
    """A composed config read both ways, once: as written (links as `${...}`) and resolved."""

    written: dict
    resolved: dict

    @classmethod
    def of(cls, cfg: DictConfig) -> Values:
        return cls(OmegaConf.to_container(cfg, resolve=False), OmegaConf.to_container(cfg, resolve=True))


def _accepted(rule: Rule, key: str, value, values: Values) -> bool:
    if rule.accepted == ANY:
        return True
    if rule.accepted == DEFAULT:
        return value == keys.resolved_default(key)
    if rule.accepted == FOLLOWS:
        target = keys.link_target(keys.written_default(key), key)
        return value == keys.lookup(values.resolved, target, None) or value in rule.also
    return value in rule.accepted


def _governed_through_link(values: Values, key: str) -> bool:
    """Not set, and following a key that a rule governs: that key is judged instead."""
    target = keys.link_target(keys.lookup(values.written, key, None), key)
    return target is not None and rule_for(target) is not None


def _set(values: Values, key: str) -> bool:
    """Given a value, not left at a default that links another key (whose value it then only shows)."""
    written = keys.lookup(values.written, key, None)
    return not (written == keys.written_default(key) and keys.link_target(written, key) is not None)


def check_support(cfg: DictConfig) -> list[str]:
    """Problems for refused values (one line each); notes for accepted non-default values, once."""
    problems: list[str] = []
    noted: set[str] = set()
    values, reads = Values.of(cfg), reader(cfg, None)
    for key in keys.leaf_keys():
        rule = rule_for(key)
        if rule is None or not reads(key):
            continue
        if _governed_through_link(values, key) and rule.accepted != FOLLOWS:
            continue
        value = keys.lookup(values.resolved, key, None)
        if not _accepted(rule, key, value, values):
            problems.append(f"{key}={format_value(value)} is not supported by verl_lite: {rule.instead}")
        elif (
            rule.note and rule.key not in noted and value != keys.resolved_default(key) and _set(values, key)
        ):
            noted.add(rule.key)
            log.info("%s=%s: %s", key, format_value(value), rule.note)
    return problems


def describe(key: str) -> str:
    """What verl_lite does with `key`, for docs/config.md; '' when it is implemented."""
    rule = rule_for(key)
    if rule is None:
        return ""
    gates = list(dict.fromkeys(g.name for _, g in gates_of(key) if not g.by_run))
    when = f"with {' and '.join(gates)} on, " if gates else ""
    if rule.accepted == ANY:
        return "verl_lite: accepted, no effect" + (f" ({rule.note})" if rule.note else "")
    if rule.accepted == FOLLOWS:
        return f"verl_lite: {when}only its linked value; otherwise refused: {rule.instead}"
    values = [keys.resolved_default(key)] if rule.accepted == DEFAULT else list(rule.accepted)
    shown = " or ".join(f"`{format_value(v)}`" for v in values)
    note = f" ({rule.note})" if rule.note else ""
    return f"verl_lite: {when}only {shown}{note}; otherwise refused: {rule.instead}"
