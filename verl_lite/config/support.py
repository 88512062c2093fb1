"""What verl_lite does with each of verl's keys it does not implement in full: ONE table.

Every key of verl's composed ppo_trainer config exists in the schema. A key is in one of three
classes:
  - implemented: verl's meaning. Every key not in RULES below.
  - accepted at the values that change nothing here (a profiler setting, torch.compile, an ignored
    multi-turn option, ...): a rule with `note`, said once in the log when set away from its default.
  - refused at any other value: `<key>=<value> is not supported by verl_lite: <instead>`, before Ray.
A rule covers one key or a whole section; a rule on a key beats its section's. A rule applies only
while the run reads its key (config/features.py, the same gate the value domains use), as verl reads
the key only then (the reward model's worker keys only with reward_model.enable; input_tokenizer only
where verl's legacy worker reads it, not under its reward loop), so a script that leaves an unused key
at any value is not refused for it; a role decided later (the critic, the reference) counts as read. Un-refusing a key
(its feature landed) is deleting its line. A key whose default links another key (`${...}`) and
was not set is judged through the key it follows, unless nothing governs that one.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from verl_lite.config import dialects, keys, verl_keys
from verl_lite.config.common import FSDP_SECTIONS, format_value
from verl_lite.config.features import gates_of, reader

log = logging.getLogger("verl_lite.config")

DEFAULT = "the default"  # accepted: only the schema's default value
ANY = "any value"  # accepted: every value (the key changes nothing here)
FOLLOWS = "the key it links"  # accepted: only the value of the key its default links to


@dataclass(frozen=True)
class Rule:
    key: str  # a dotted key, or a section: every key under it
    accepted: object = DEFAULT  # DEFAULT | ANY | FOLLOWS | a tuple of values
    instead: str = ""  # refused: what to use instead
    note: str = ""  # accepted at a non-default value: said once in the log
    also: tuple = ()  # FOLLOWS: values accepted besides the linked one (verl's null fallback)


ARR = "actor_rollout_ref"
SOON = "not in verl_lite yet (being built)"
PROFILERS = (f"{ARR}.actor.profiler", f"{ARR}.ref.profiler", f"{ARR}.rollout.profiler", "critic.profiler")
NO_PROFILER = "verl_lite has no profiler integration: nothing is recorded"
STRATEGIES = ("fsdp", "fsdp2")
FSDP1 = "FSDP1 and Megatron are not available; fsdp and fsdp2 both run FSDP2 (fully_shard)"


def _fsdp_rules(section: str) -> list[Rule]:
    return [
        # verl's new-engine spellings; its legacy FSDP workers (verl_lite's model) read the role's keys
        Rule(
            f"{section}.ulysses_sequence_parallel_size",
            instead="set the role's ulysses_sequence_parallel_size (e.g. actor_rollout_ref.actor.*)",
        ),
        Rule(
            f"{section}.entropy_from_logits_with_chunking",
            instead="set actor_rollout_ref.actor.entropy_from_logits_with_chunking",
        ),
        Rule(f"{section}.entropy_checkpointing", instead="set actor_rollout_ref.actor.entropy_checkpointing"),
        Rule(
            f"{section}.use_torch_compile", ANY, note="verl_lite does not torch.compile kernels (same math)"
        ),
        Rule(f"{section}.seed", ANY, note="verl's default (legacy) worker ignores it too; no effect"),
        Rule(
            f"{section}.full_determinism",
            ANY,
            note="verl's default (legacy) worker ignores it too; no effect",
        ),
        Rule(f"{section}.forward_only", ANY),
        Rule(f"{section}.use_orig_params", ANY, note="FSDP2 always trains the original parameters"),
        Rule(f"{section}.limit_all_gathers", ANY, note="FSDP2 bounds in-flight all-gathers itself"),
        Rule(f"{section}.strategy", STRATEGIES, instead=FSDP1),
    ]


RULES: list[Rule] = [
    *[rule for section in FSDP_SECTIONS.values() for rule in _fsdp_rules(section)],
    *[Rule(p, ANY, note=NO_PROFILER) for p in (*PROFILERS, "reward_model.profiler", "global_profiler")],
    *[
        Rule(f"{s}.optimizer", ("AdamW",), instead="only torch.optim.AdamW")
        for s in (f"{ARR}.actor.optim", "critic.optim")
    ],
    *[
        Rule(f"{s}.optimizer_impl", ("torch.optim",), instead="only torch.optim.AdamW")
        for s in (f"{ARR}.actor.optim", "critic.optim")
    ],
    *[
        Rule(f"{s}.override_optimizer_config", instead="set the optimizer's lr, betas and weight_decay")
        for s in (f"{ARR}.actor.optim", "critic.optim")
    ],
    *[
        Rule(
            f"{s}.checkpoint.async_save",
            ANY,
            note="verl saves FSDP checkpoints synchronously too (async: Megatron only)",
        )
        for s in (f"{ARR}.actor", "critic")
    ],
    *[
        Rule(f"{s}.shuffle", ANY, note="verl's default (legacy) worker takes mini-batches in order too")
        for s in (f"{ARR}.actor", "critic")
    ],
    *[Rule(f"{s}.data_loader_seed", ANY) for s in (f"{ARR}.actor", "critic")],
    *[
        Rule(f"{s}.rollout_n", FOLLOWS, instead=f"it is {ARR}.rollout.n; set that")
        for s in (f"{ARR}.actor", f"{ARR}.ref", "critic")
    ],
    Rule(
        "reward_model.ulysses_sequence_parallel_size",
        instead="the reward model runs without sequence parallelism; keep 1",
    ),
    *[
        Rule(f"{s}.use_torch_compile", ANY, note="verl_lite does not torch.compile kernels (same math)")
        for s in (f"{ARR}.actor", f"{ARR}.ref")
    ],
    *[
        Rule(f"{s}.router_replay.mode", ("disabled",), instead="MoE routing replay is not available")
        for s in (f"{ARR}.actor", f"{ARR}.ref")
    ],
    *[Rule(f"{s}.router_replay", ANY) for s in (f"{ARR}.actor", f"{ARR}.ref")],
    *[
        Rule(s, STRATEGIES, instead=FSDP1)
        for s in (f"{ARR}.actor.strategy", f"{ARR}.ref.strategy", "critic.strategy")
    ],
    Rule("reward_model.strategy", STRATEGIES, instead=FSDP1),
    # actor
    Rule(f"{ARR}.actor.freeze_vision_tower", instead="vision-language models are not supported"),
    Rule(f"{ARR}.actor.calculate_entropy", ANY, note="verl_lite always computes the entropy (actor/entropy)"),
    Rule(f"{ARR}.actor.use_prefix_grouper", instead="every response runs its own forward (same math)"),
    Rule(f"{ARR}.actor.use_fused_kernels", FOLLOWS, instead=f"set {ARR}.model.use_fused_kernels"),
    Rule(f"{ARR}.actor.use_remove_padding", FOLLOWS, instead=f"set {ARR}.model.use_remove_padding"),
    Rule(
        f"{ARR}.actor.sum_pi_squared_checkpointing",
        ANY,
        note="sum_pi_squared is computed only in compute_log_prob, without gradient: nothing to recompute",
    ),
    # model
    Rule(
        f"{ARR}.model.hf_config_path",
        instead=f"keep config.json in {ARR}.model.path (or use model.override_config)",
    ),
    Rule(f"{ARR}.model.use_liger", instead="Liger kernels are not available"),
    Rule(f"{ARR}.model.fused_kernel_options", ANY),
    Rule(f"{ARR}.model.mtp.enable", instead="multi-token prediction is not available"),
    Rule(f"{ARR}.model.mtp", ANY),
    # rollout
    Rule(f"{ARR}.hybrid_engine", (True,), instead="the actor and its rollout always share each worker"),
    Rule(f"{ARR}.rollout.mode", ("async", "sync"), instead="async or sync (both run in the hybrid engine)"),
    Rule(
        f"{ARR}.rollout.cudagraph_capture_sizes", ANY, note="vLLM captures its own default sizes (speed only)"
    ),
    Rule(
        f"{ARR}.rollout.data_parallel_size",
        instead="one vLLM engine per TP group; scale with trainer.n_gpus_per_node",
    ),
    Rule(f"{ARR}.rollout.expert_parallel_size", instead="expert parallelism is not available"),
    Rule(f"{ARR}.rollout.pipeline_model_parallel_size", instead="use tensor_model_parallel_size"),
    Rule(f"{ARR}.rollout.logprobs_mode", instead="the rollout's log-probs are processed_logprobs"),
    Rule(f"{ARR}.rollout.scheduling_policy", instead="vLLM schedules first come, first served"),
    Rule(f"{ARR}.rollout.over_sample_rate", instead="every request of a step runs to completion"),
    Rule(f"{ARR}.rollout.multi_stage_wake_up", ANY, note="SGLang only in verl; no effect on vLLM"),
    Rule(f"{ARR}.rollout.engine_kwargs.sglang", ANY),
    Rule(f"{ARR}.rollout.prometheus.enable", instead="there is no rollout server to export metrics from"),
    Rule(f"{ARR}.rollout.prometheus", ANY),
    Rule(f"{ARR}.rollout.engine_kwargs.trtllm", ANY),
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
    Rule(
        f"{ARR}.rollout.agent.num_workers",
        ANY,
        note="the agent loops run inside each rollout worker (trainer.n_gpus_per_node of them)",
    ),
    Rule(f"{ARR}.rollout.agent.custom_async_server", instead="generation runs in the hybrid engine"),
    Rule(  # read outside separate_async only (config/features.py): there the transport is Ray's
        f"{ARR}.rollout.checkpoint_engine.backend",
        instead="weights reach the hybrid engine's rollout in-process (naive)",
    ),
    Rule(f"{ARR}.rollout.checkpoint_engine.engine_kwargs", ANY),
    # verl traces each agent loop run and generate call to weave / mlflow / trackio (rollout_trace.py)
    Rule(
        f"{ARR}.rollout.trace.backend",
        instead="verl_lite does not trace rollouts (verl's weave / mlflow / trackio spans); leave it null "
        "and read the rollouts in trainer.rollout_data_dir (each step's generations as jsonl) or "
        "trainer.log_val_generations (console, file, wandb)",
    ),
    Rule(
        f"{ARR}.rollout.trace",
        ANY,
        note="read only with rollout.trace.backend, which verl_lite refuses: no effect, as in verl with no backend",
    ),
    Rule(f"{ARR}.rollout.skip_rollout", instead="every step generates"),
    Rule(f"{ARR}.rollout.skip_dump_dir", ANY),
    Rule(f"{ARR}.rollout.skip_tokenizer_init", ANY),
    Rule(f"{ARR}.rollout.enable_rollout_routing_replay", instead="MoE routing replay is not available"),
    Rule(f"{ARR}.rollout.quantization", instead="the rollout runs unquantized weights (rollout.dtype)"),
    Rule(f"{ARR}.rollout.quantization_config_file", instead="the rollout runs unquantized weights"),
    # verl: ${oc.select:actor_rollout_ref.model.mtp, null}; null is no MTP
    Rule(f"{ARR}.rollout.mtp", FOLLOWS, instead=f"set {ARR}.model.mtp", also=(None,)),
    # data
    Rule("data.use_shm", ANY, note="the driver reads the data files once; /dev/shm changes nothing"),
    Rule("data.return_raw_input_ids", ANY),
    Rule("data.return_full_prompt", ANY),
    Rule("data.dataloader_num_workers", ANY),
    Rule("data.image_patch_size", ANY),
    Rule("data.image_key", ANY),
    Rule("data.video_key", ANY),
    Rule("data.return_multi_modal_inputs", ANY),
    Rule("data.validation_shuffle", ANY, note="validation metrics are means over the whole set: no effect"),
    Rule("data.filter_overlong_prompts_workers", ANY),
    Rule("data.custom_cls", instead="datasets are verl's RLHF parquet layout (data.train_files)"),
    Rule("data.sampler", instead="the sampler shuffles by data.seed (data.shuffle)"),
    Rule("data.datagen", instead="datasets are verl's RLHF parquet layout (data.train_files)"),
    # reward
    Rule(
        "reward_manager.source",
        ("register",),
        instead="register a manager in verl_lite/reward/managers.py, or use custom_reward_function",
    ),
    Rule("reward_manager.module", ANY),
    Rule(  # verl's reward loop ignores input_tokenizer: refused only where it is read (the legacy worker)
        "reward_model.model.input_tokenizer",
        (None,),
        instead="the reward model reads the actor's token ids as they are (no chat-template switch); use one that shares the actor's tokenizer and set reward_model.model.input_tokenizer=null",
    ),
    Rule(
        "reward_model.model.use_fused_kernels",
        ANY,
        note="the reward model's score head computes no token log-probs: nothing to fuse",
    ),
    Rule("reward_model.enable_resource_pool", instead="the reward model shares the actor's workers"),
    Rule("reward_model.n_gpus_per_node", ANY),
    Rule("reward_model.nnodes", ANY),
    Rule("reward_model.max_length", instead="responses are scored whole; shorten data.max_response_length"),
    Rule("reward_model.reward_loop_source", ("register",), instead="use reward_model.reward_manager"),
    Rule("reward_model.reward_loop_module_path", instead="use reward_model.reward_manager"),
    Rule("reward_model.reward_loop_class_name", instead="use reward_model.reward_manager"),
    Rule(
        "reward_model.launch_reward_fn_async",
        ANY,
        note="rewards are computed in order here (the same rewards)",
    ),
    Rule("reward_model.sandbox_fusion.url", instead="use custom_reward_function.path for code rewards"),
    Rule("reward_model.sandbox_fusion", ANY),
    Rule(
        "reward_model.use_reward_loop",
        (False,),
        instead="verl's reward loop re-templates the reward model's input and serves the model with vLLM; "
        "verl_lite runs verl's legacy reward-model worker (FSDP): set reward_model.use_reward_loop=False",
    ),
    Rule("reward_model.num_workers", ANY),
    Rule("reward_model.rollout", ANY),  # read only by verl's reward loop (refused above when it would run)
    # algorithm
    Rule("algorithm.use_pf_ppo", instead="policy-filtered PPO is not available"),
    Rule("algorithm.pf_ppo", ANY),
    # trainer, Ray, the rest
    Rule("trainer.esi_redundant_time", ANY),
    Rule("trainer.default_hdfs_dir", instead="checkpoints go to trainer.default_local_dir"),
    Rule("trainer.ray_wait_register_center_timeout", ANY),
    Rule(
        "trainer.use_legacy_worker_impl",
        ("auto", "enable", "disable"),
        instead="auto, enable or disable",
        note="verl_lite has one worker implementation",
    ),
    # verl 0.9's V1 trainer (read only with trainer.use_v1, config/features.py): sync is verl_lite's trainer,
    # colocate_async trainer/colocate_async.py, separate_async trainer/separate_async.py
    Rule(
        "trainer.use_v1",
        ANY,
        note="verl_lite's sync trainer is verl 0.9's V1 sync trainer and its legacy one alike (the same PPO "
        "step); only trainer.v1.trainer_mode=colocate_async|separate_async changes the schedule, and only "
        "with use_v1",
    ),
    Rule("trainer.v1.sync", instead="verl 0.9's sync mode has no settings; leave it {}"),
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
    Rule(
        "trainer.v1.sampler.sync_refill_failed_groups",
        ANY,
        note="a rollout that fails stops the run here: no failed group is left to refill",
    ),
    Rule(  # read outside separate_async only (config/features.py)
        f"{ARR}.rollout.nnodes",
        instead="a rollout group on devices of its own is verl 0.9's separate_async trainer's "
        "(trainer.use_v1=True trainer.v1.trainer_mode=separate_async); keep 0: the rollout shares the "
        "trainer's workers",
    ),
]


def _rules_by_key() -> dict[str, Rule]:
    found: dict[str, Rule] = {}
    for rule in RULES:
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
    """verl 0.9.1's key the dataclasses lack: accepted at its default here (a link: the linked value)."""
    default = keys.added_keys()[key]
    target = keys.link_target(default, key)
    if dialects.spelling(key) is not None and target is not None:  # a verl 0.9 spelling of a held key
        return Rule(
            key, FOLLOWS, instead=f"its value is {target}'s: set {key} on the command line or {target}"
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
