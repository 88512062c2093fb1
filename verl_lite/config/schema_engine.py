"""Schema sections shared by every trained or served model: FSDP2 and offload, optimizer and LR
schedule, checkpoint contents, MoE router replay.

Defaults are verl's (config/schema.py says how); each field's comment (at the end of its line,
or above a field too long for one) is its documentation in docs/config.md. Keys verl_lite accepts only at some values are listed in
config/support.py, which docs/config.md also shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl_lite.config.fields import (
    BETAS,
    NON_NEG,
    NON_NEG_INT,
    POS,
    SHARDS,
    UNIT,
    WARMUP_STEPS,
    choice,
    key,
    no_effect,
    only,
    refused,
)
from verl_lite.config.freeze import ConfigNode
from verl_lite.config.gates import COSINE, WARMUP_RATIO

# torch dtypes by the names the config takes (engine/parallelize.py maps them)
DTYPES = ("bf16", "bfloat16", "float16", "float32", "fp16", "fp32")
LR_SCHEDULER_TYPES = ("constant", "cosine")
STRATEGIES = ("fsdp", "fsdp2")
FSDP1 = "FSDP1 and Megatron are not available; fsdp and fsdp2 both run FSDP2 (fully_shard)"


@dataclass
class WrapPolicyConfig(ConfigNode):
    # 0: one fully_shard per decoder layer; >0: per submodule this large
    min_num_params: int = key(0, NON_NEG_INT)


@dataclass
class MixedPrecisionConfig(ConfigNode):
    # dtype params are gathered in for forward/backward (fp32 on CPUs: bf16 is slow there)
    param_dtype: str = key("${..dtype}", choice(DTYPES))
    reduce_dtype: str = key("fp32", choice(DTYPES))  # dtype gradients are reduce-scattered in
    # dtype of module buffers (rotary tables stay fp32 unless set)
    buffer_dtype: str = key("fp32", choice(DTYPES))


@dataclass
class FSDPConfig(ConfigNode):
    wrap_policy: WrapPolicyConfig = field(default_factory=WrapPolicyConfig)
    param_offload: bool = False  # sharded params on the host between phases, back on the device inside them
    optimizer_offload: bool = False  # optimizer state on the host except during the optimizer step
    # FSDP2 CPUOffloadPolicy: params, grads, optimizer on the host, step on the host
    offload_policy: bool = False
    # free gathered params after forward, gather again in backward (ZeRO-3)
    reshard_after_forward: bool = True
    # ranks per FSDP shard group (HSDP when smaller than the world); -1: all ranks
    fsdp_size: int = key(-1, SHARDS)
    # explicitly prefetch the next layer's all-gather (and the previous in backward)
    forward_prefetch: bool = False
    # dtype the sharded (master) params are kept in; a frozen engine (ref, reward model) keeps fp32 ones in mixed_precision.param_dtype (same numbers, fewer bytes)
    model_dtype: str = key("fp32", choice(DTYPES))
    # FSDP1 key: accepted; FSDP2 always keeps the original parameters
    use_orig_params: bool = key(False, rule=no_effect("FSDP2 always trains the original parameters"))
    # verl's new engine: seed of full_determinism (the legacy worker, verl's default, ignores it)
    seed: int = key(42, rule=no_effect("verl's default (legacy) worker ignores it too; no effect"))
    # verl's new engine: deterministic algorithms for debugging
    full_determinism: bool = key(
        False, rule=no_effect("verl's default (legacy) worker ignores it too; no effect")
    )
    # ranks one sequence is split over (Ulysses sequence parallelism)
    ulysses_sequence_parallel_size: int = key(
        1, rule=refused("set the role's ulysses_sequence_parallel_size (e.g. actor_rollout_ref.actor.*)")
    )
    # compute the entropy over vocabulary chunks (memory)
    entropy_from_logits_with_chunking: bool = key(
        False, rule=refused("set actor_rollout_ref.actor.entropy_from_logits_with_chunking")
    )
    # torch.compile the entropy/log-prob kernels (speed only)
    use_torch_compile: bool = key(
        True, rule=no_effect("verl_lite does not torch.compile kernels (same math)")
    )
    # recompute the entropy in backward instead of keeping it (memory)
    entropy_checkpointing: bool = key(
        False, rule=refused("set actor_rollout_ref.actor.entropy_checkpointing")
    )
    # verl's engine flag for models that are never trained (the ref: True)
    forward_only: bool = key(False, rule=no_effect())
    strategy: str = key("fsdp", rule=only(STRATEGIES, FSDP1))  # fsdp | fsdp2: both run FSDP2 (fully_shard)
    # verl's new-engine name of the compute dtype: the default of mixed_precision.param_dtype
    dtype: str = "bfloat16"
    # verl's legacy worker keys, added with '+' there
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)
    gradient_offload: bool = False  # grads on the host; FSDP2 offers it only with offload_policy=True
    # False: keep unsharded grads until the last micro-batch, reduce once
    reduce_scatter_every_micro_batch: bool = True
    # FSDP1 key: accepted; FSDP2 bounds in-flight all-gathers itself
    limit_all_gathers: bool | None = key(None, rule=no_effect("FSDP2 bounds in-flight all-gathers itself"))


@dataclass
class OptimConfig(ConfigNode):
    # optimizer class in optimizer_impl
    optimizer: str = key("AdamW", rule=only(("AdamW",), "only torch.optim.AdamW"))
    lr: float = key(1e-6, POS)  # learning rate
    # warm-up as a fraction of all training steps
    lr_warmup_steps_ratio: float = key(0.0, UNIT, gate=WARMUP_RATIO)
    total_training_steps: int = -1  # filled in at start-up from the data: training steps of the whole run
    weight_decay: float = key(0.01, NON_NEG)  # AdamW decoupled weight decay
    # warm-up training steps; -1 or null: use lr_warmup_steps_ratio
    lr_warmup_steps: int | None = key(-1, WARMUP_STEPS)
    betas: list[float] = key(domain=BETAS, factory=lambda: [0.9, 0.999])  # AdamW betas
    # max global grad norm (verl's new-engine name); the actor's / critic's grad_clip follows it
    clip_grad: float = key(1.0, POS)
    min_lr_ratio: float | None = key(0.0, UNIT, gate=COSINE)  # cosine floor as a fraction of lr
    num_cycles: float = key(0.5, POS, gate=COSINE)  # cosine cycles over the run
    # schedule after warm-up: constant | cosine
    lr_scheduler_type: str = key("constant", choice(LR_SCHEDULER_TYPES))
    warmup_style: str | None = None  # verl's deprecated name of lr_scheduler_type; set: it wins


@dataclass
class CheckpointConfig(ConfigNode):
    # what a checkpoint holds: model | optimizer | extra (lr schedule, RNG, rollout state) | hf_model (full weights, safetensors)
    save_contents: list[str] = field(default_factory=lambda: ["model", "optimizer", "extra"])
    load_contents: list[str] = "${.save_contents}"  # what a resume restores (model, optimizer, extra)


@dataclass
class RouterReplayConfig(ConfigNode):
    # MoE routing replay: disabled | record | replay
    mode: str = key("disabled", rule=only(("disabled",), "MoE routing replay is not available"))
    record_file: str | None = None  # where recorded routing decisions go
    replay_file: str | None = None  # recorded routing decisions to replay
