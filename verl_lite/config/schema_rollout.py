"""Schema section of the rollout (actor_rollout_ref.rollout): sampling, the vLLM engine, and verl's
agent-loop, multi-turn, tracing and serving keys.

Defaults are verl's (config/schema.py says how); each field's comment (at the end of its line,
or above a field too long for one) is its documentation in docs/config.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl_lite.config.fields import (
    MICRO,
    NON_NEG,
    NON_NEG_INT,
    POS,
    POS_INT,
    SHARE,
    TOP_K,
    choice,
    follows,
    key,
    no_effect,
    only,
    refused,
)
from verl_lite.config.freeze import ConfigNode
from verl_lite.config.gates import HYBRID_ROLLOUT, LOG_PROB_DYNAMIC, LOG_PROB_FIXED, ROLLOUT_GROUP
from verl_lite.config.schema_engine import DTYPES

TRUNCATE_SIDES = ("left", "middle", "right")  # a tool's response over max_tool_response_length
SANITY_CHECK_MODES = ("disable", "strict", "ignore_strippable")
# dummy starts vLLM without weights (the first sync brings them); the others read model.path at
# start-up (the HF rollout always does)
LOAD_FORMATS = ("dummy", "auto", "safetensors")

ARR = "actor_rollout_ref"


@dataclass
class SamplingKwargs(ConfigNode):
    top_k: int = key(-1, TOP_K)  # -1: no top-k
    top_p: float = key(1.0, SHARE)  # nucleus sampling mass (1.0: off)
    temperature: float = key(0.0, NON_NEG)  # 0: greedy
    n: int = key(1, POS_INT)  # samples per prompt
    do_sample: bool = False  # False: greedy validation


@dataclass
class EngineKwargs(ConfigNode):
    vllm: dict[str, Any] = field(default_factory=dict)  # extra vLLM engine arguments (LLM(**vllm))
    sglang: dict[str, Any] = key(factory=dict, rule=no_effect())  # extra SGLang engine arguments
    trtllm: dict[str, Any] = key(factory=dict, rule=no_effect())  # extra TensorRT-LLM engine arguments


@dataclass
class MultiTurnConfig(ConfigNode):
    enable: bool = False  # multi-turn rollouts with tools or interactions; rows pick their loop by agent_name (docs/multi_turn.md)
    # most model turns per trajectory; null: no limit
    max_assistant_turns: int | None = key(None, POS_INT.or_null("no limit"))
    # tools' config file, verl's format (tools: class_name, config, tool_schema)
    tool_config_path: str | None = None
    # most tool or user turns per trajectory; null: no limit
    max_user_turns: int | None = key(None, POS_INT.or_null("no limit"))
    # tool calls run per turn (concurrently); further calls of the turn are not run, and counted
    max_parallel_calls: int = key(1, POS_INT)
    max_tool_response_length: int = key(256, POS_INT)  # characters kept of a tool's text (verl's truncation)
    # left (cut the start, keep the end) | middle | right (cut the end, keep the start)
    tool_response_truncate_side: str = key("middle", choice(TRUNCATE_SIDES))
    interaction_config_path: str | None = None  # interactions' (simulated users') config file, verl's format
    # compare each trajectory with its conversation rendered whole: disable | strict | ignore_strippable
    tokenization_sanity_check_mode: str = key("strict", choice(SANITY_CHECK_MODES))
    format: str = "hermes"  # tool-call parser by its registered name (agent_loop/parsers/): hermes | gpt-oss | qwen3_coder | glm | a user's (@ToolParser.register in a module VERL_USE_EXTERNAL_MODULES names)
    # verl_lite's own key

    # seconds a tool call may run before the model is told it timed out
    tool_call_timeout: float = key(60.0, POS)


@dataclass
class AgentLoopConfig(ConfigNode):
    # agent-loop workers of verl's async server mode
    num_workers: int = key(
        8, rule=no_effect("the agent loops run inside each rollout worker (trainer.n_gpus_per_node of them)")
    )
    default_agent_loop: str = "single_turn_agent"  # agent loop of rows without agent_name: single_turn_agent | tool_agent | a loop of agent_loop_config_path
    # YAML list of your agent loops: {name, _target_: dotted class path, its keyword arguments}
    agent_loop_config_path: str | None = None
    # verl_lite's own key

    # seconds a trajectory's loop may run between two generations (its own code, its tool and interaction calls); then the rollout fails naming the loop and what it waits in; null: (3 + 2 x tools) x multi_turn.tool_call_timeout
    loop_timeout: float | None = key(None, POS.or_null("(3 + 2 x tools) x tool_call_timeout"))


@dataclass
class CheckpointEngineConfig(ConfigNode):
    # how weights reach the rollout: naive (in-process) | nccl | nixl | hccl
    backend: str | None = key(
        "naive",
        gate=HYBRID_ROLLOUT,
        rule=refused("weights reach the hybrid engine's rollout in-process (naive)"),
    )
    # weight sync: full tensors gathered per bucket before vLLM loads them
    update_weights_bucket_megabytes: int = key(2048, POS_INT)
    engine_kwargs: dict[str, Any] = key(factory=dict, rule=no_effect())  # backend arguments


@dataclass
class TraceConfig(ConfigNode):
    # rollout tracing: weave | mlflow | trackio
    backend: str | None = key(
        None,
        rule=refused(
            "verl_lite does not trace rollouts (verl's weave / mlflow / trackio spans); leave it null and read the rollouts in trainer.rollout_data_dir (each step's generations as jsonl) or trainer.log_val_generations (console, file, wandb)"
        ),
    )


@dataclass
class RolloutConfig(ConfigNode):
    # rollout backend: vllm | hf (transformers generate, the reference); auto: vllm where it is installed, else hf
    name: str | None = key(
        "auto",
        deviates="verl makes it mandatory (`???`); `auto` picks vllm where it is installed, else hf "
        "(transformers' generate), so the same command runs with or without vLLM",
    )
    # async (verl's server mode) | sync: both run the hybrid engine, generation and training taking turns
    mode: str = key(
        "async",
        rule=only(("async", "sync"), "async or sync (both run in the hybrid engine)"),
        deviates="verl's async server mode generates with the same sampling and gives the same updates; here "
        "generation runs synchronously inside the hybrid engine (said once in the log)",
    )
    # nodes of standalone rollout servers (verl 0.9's separate_async trainer); 0: the rollout shares the trainer's workers
    nnodes: int = key(
        0,
        gate=HYBRID_ROLLOUT,
        rule=refused(
            "a rollout group on devices of its own is verl 0.9's separate_async trainer's (trainer.use_v1=True trainer.v1.trainer_mode=separate_async); keep 0: the rollout shares the trainer's workers"
        ),
    )
    # GPUs per node of those servers
    n_gpus_per_node: int | None = key("${oc.select:trainer.n_gpus_per_node,8}", gate=ROLLOUT_GROUP)
    temperature: float = key(1.0, NON_NEG)  # sampling temperature of training rollouts
    top_k: int = key(-1, TOP_K)  # -1: no top-k
    top_p: float = key(1.0, SHARE)  # nucleus sampling mass (1.0: off)
    # prompt tokens the rollout takes (left-padded)
    prompt_length: int | None = key("${data.max_prompt_length}", POS_INT)
    # most tokens generated per response
    response_length: int | None = key("${data.max_response_length}", POS_INT)
    dtype: str = key("bfloat16", choice(DTYPES))  # dtype of the rollout copy of the weights
    gpu_memory_utilization: float = key(0.5, SHARE)  # share of the GPU vLLM may use for weights and KV cache
    ignore_eos: bool = False  # keep generating past EOS up to response_length
    # no CUDA graphs / torch.compile; on CPU False means an inductor compile at start
    enforce_eager: bool = False
    # GPU: release weights and KV cache after generation (vLLM sleep level 2); no-op on CPU
    free_cache_engine: bool = True
    # ranks per vLLM engine (TP), must divide the world; the hf rollout has no TP: each worker generates alone
    tensor_model_parallel_size: int = key(
        2,
        POS_INT,
        deviates="verl's value, applied by the vLLM rollout; the hf rollout has no tensor parallelism (each "
        "worker generates for its own prompts with its full weights), which is said once in the log",
    )
    max_num_batched_tokens: int = key(8192, POS_INT)  # tokens per vLLM scheduler step
    # longest prompt + response; null: prompt_length + response_length
    max_model_len: int | None = key(None, POS_INT.or_null("prompt_length + response_length"))
    max_num_seqs: int = key(256, POS_INT)  # sequences vLLM runs at once
    enable_chunked_prefill: bool = True  # split long prefills across scheduler steps
    enable_prefix_caching: bool = True  # reuse KV of shared prompt prefixes (reset at every weight sync)
    # the rollout's log-probs: after temperature/top-k/top-p
    logprobs_mode: str | None = key(
        "processed_logprobs", rule=refused("the rollout's log-probs are processed_logprobs")
    )
    # vLLM's start-up weights: dummy (random; the first sync brings the actor's) | auto | safetensors (read from model.path; with LoRA no base weights are ever synced)
    load_format: str = key("dummy", choice(LOAD_FORMATS))
    # deprecated global size; use the per-GPU key
    log_prob_micro_batch_size: int | None = key(None, MICRO, gate=LOG_PROB_FIXED)
    # responses per old-log-prob forward
    log_prob_micro_batch_size_per_gpu: int | None = key(None, MICRO, gate=LOG_PROB_FIXED)
    # token-budgeted old-log-prob forwards
    log_prob_use_dynamic_bsz: bool = f"${{{ARR}.actor.use_dynamic_bsz}}"
    # token budget per old-log-prob forward
    log_prob_max_token_len_per_gpu: int = key(
        f"${{{ARR}.actor.ppo_max_token_len_per_gpu}}", POS_INT, gate=LOG_PROB_DYNAMIC
    )
    disable_log_stats: bool = True  # no vLLM throughput logging
    do_sample: bool = True  # False: greedy decoding for training rollouts
    n: int = key(1, POS_INT)  # responses per prompt
    engine_kwargs: EngineKwargs = field(default_factory=EngineKwargs)
    val_kwargs: SamplingKwargs = field(default_factory=SamplingKwargs)  # sampling of validation generations
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    calculate_log_probs: bool = True  # the rollout's log-probs reach the trainer: rollout_corr/* metrics (algos/rollout_corr.py; verl_lite's rollouts always compute them)
    agent: AgentLoopConfig = field(default_factory=AgentLoopConfig)
    checkpoint_engine: CheckpointEngineConfig = field(default_factory=CheckpointEngineConfig)
    trace: TraceConfig = key(
        factory=TraceConfig,
        rule=no_effect(
            "read only with rollout.trace.backend, which verl_lite refuses: no effect, as in verl with no backend"
        ),
    )
    # reuse rollouts dumped in skip_dump_dir instead of generating
    skip_rollout: bool = key(False, rule=refused("every step generates"))
    skip_dump_dir: str = key("/tmp/rollout_dump", rule=no_effect())  # where skip_rollout keeps them
    skip_tokenizer_init: bool = key(True, rule=no_effect())  # the engine takes and returns token ids only
    # vLLM weight quantization: fp8 | torchao
    quantization: str | None = key(None, rule=refused("the rollout runs unquantized weights (rollout.dtype)"))
    # multi-token prediction: the model's mtp section
    mtp: Any = key(f"${{{ARR}.model.mtp}}", rule=follows("set actor_rollout_ref.model.mtp", also=(None,)))
    layered_summon: bool = False  # LoRA: gather the adapter layer by layer for the sync (verl_lite always gathers one tensor at a time); vLLM needs load_format other than dummy
    # verl_lite's own keys
    seed: int = key(42, NON_NEG_INT)  # seed of the rollout's own sampling generator (per rank and call)
    # verl's older name of the sync bucket size
    update_weights_bucket_megabytes: int = key(
        "${.checkpoint_engine.update_weights_bucket_megabytes}", POS_INT
    )
    # CPU only: host memory (GiB) per rank for vLLM's KV cache; VLLM_CPU_KVCACHE_SPACE wins
    cpu_kv_cache_gb: float = key(1.0, POS)
