"""What the memory model is asked about one engine: its `EngineSetup`, and the tensors it freezes and
trains (`Parts`).

An EngineSetup is the part of a run's config one engine's memory depends on (world size, dtypes,
micro-batch and sequence lengths, offload mode, memory levers, LoRA), so the planner, the trainer's
auto-offload and scripts/gpu_check.py describe an engine the same way. `storage_dtype` is the dtype
the engine keeps its weights in (engine/model_shape.py: the engine's own rule). `parts` splits the
model's tensors into frozen ones (storage_dtype) and trained ones: all or nothing without LoRA; with
LoRA (`lora_rank` > 0, engine/lora.py) the adapters of every adapted linear (out x in gains A, rank x in,
and B, out x rank; fp32 whatever model_dtype, as PEFT upcasts 16-bit adapters) and the critic's
trained copy of its value head (PEFT's modules_to_save), beside the frozen base.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_lite.engine.model_shape import LINEARS, ModelShape, dtype_bytes, storage_dtype

MODES = ("none", "param_optimizer_offload", "offload_policy")
ADAPTER_BYTES = 4  # LoRA adapters are fp32 whatever model_dtype (PEFT's autocast_adapter_dtype)


@dataclass(frozen=True)
class EngineSetup:
    world: int  # ranks the model is sharded over
    mode: str  # one of MODES
    micro: int  # responses per training micro-batch (0: the engine does not train)
    seq_len: int  # prompt + response tokens per response
    response_len: int
    model_dtype: str = "fp32"
    param_dtype: str = "fp32"  # mixed_precision.param_dtype: gathered params and activations
    reduce_dtype: str = "fp32"  # mixed_precision.reduce_dtype: reduce-scatter and grad accumulation
    grad_checkpointing: bool = False
    reshard_after_forward: bool = True
    reduce_every_micro: bool = True
    tokens_per_micro: int | None = None  # use_dynamic_bsz: the token budget replaces micro x seq_len
    trains: bool = True  # False: a frozen engine (ref, reward model): no grads, no optimizer
    forward_micro: int = 0  # responses per no-grad forward (log-probs, values, scores)
    forward_tokens: int | None = None  # its token budget with dynamic batching
    pinned_host: bool = False  # host copies are pinned (GPU machines)
    sp_size: int = 1  # ulysses_sequence_parallel_size: ranks sharing one micro-batch's tokens
    fused: bool = False  # use_fused_kernels: log-probs and entropy from hidden states in chunks
    entropy_chunking: bool = False  # entropy_from_logits_with_chunking
    entropy_checkpointing: bool = False
    activation_offload: bool = False  # enable_activation_offload (training forwards only)
    lora_rank: int = 0  # > 0: LoRA adapters of this rank train on the frozen model (engine/lora.py)
    lora_targets: tuple[str, ...] = LINEARS  # the adapted linears of each decoder layer
    dense_mask: bool = True  # the attention kernel takes a (rows, S, S) mask: sdpa, eager (attention.py)

    @property
    def storage_dtype(self) -> str:
        """The dtype of the engine's weights (`storage_dtype` above)."""
        return storage_dtype(self.model_dtype, self.param_dtype, self.trains)


@dataclass(frozen=True)
class Parts:
    """(dim 0, numel) of the tensors of one decoder layer and of the root, split into the frozen ones
    (storage_dtype) and the trained ones (model_dtype; LoRA's adapters: fp32)."""

    layer_frozen: list[tuple[int, int]]
    root_frozen: list[tuple[int, int]]
    layer_trained: list[tuple[int, int]]
    root_trained: list[tuple[int, int]]
    trained_bytes: int  # bytes per trained element

    def full(self, which: str) -> int:
        """Elements of 'layer' / 'root' (frozen and trained), or of their trained part ('layer_trained', ...)."""
        if which in ("layer", "root"):
            return sum(n for _, n in getattr(self, f"{which}_frozen") + getattr(self, f"{which}_trained"))
        return sum(n for _, n in getattr(self, which))


def adapter_tensors(shape: ModelShape, rank: int, targets: tuple[str, ...]) -> list[tuple[int, int]]:
    """LoRA's A (rank x in) and B (out x rank) of every adapted linear of one decoder layer."""
    linears = shape.linears()
    unknown = [t for t in targets if t not in linears]
    if unknown:
        raise ValueError(f"LoRA targets {unknown} are not among the decoder's linears {list(linears)}")
    out = []
    for name in targets:
        o, i = linears[name]
        out += [(rank, rank * i), (o, o * rank)]
    return out


def parts(shape: ModelShape, s: EngineSetup) -> Parts:
    """What this engine freezes and trains: all or nothing without LoRA; with LoRA the adapters (and
    the value head's trained copy), beside the frozen base."""
    p = dtype_bytes(s.storage_dtype)
    layer, root = shape.layer_tensors(), shape.root_tensors()
    if not s.lora_rank:
        if s.trains:
            return Parts([], [], layer, root, p)
        return Parts(layer, root, [], [], p)
    adapters = adapter_tensors(shape, s.lora_rank, s.lora_targets)
    head = [(1, shape.hidden), (1, 1)] if shape.head == "value" else []  # PEFT's modules_to_save copy
    return Parts(layer, root, adapters, head, ADAPTER_BYTES)
