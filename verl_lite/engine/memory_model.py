"""Memory of one FSDP2 engine on one rank, estimated from the model's shape: the planner's math.

Pure arithmetic on a `ModelShape` (read from a HF config.json) and an `EngineSetup` (world size,
dtypes, micro-batch, sequence length, offload mode). No torch: the planner (plan_memory.py), the
trainer's auto-offload and scripts/gpu_check.py use it; tests/engine/test_memory_model.py checks
every term against a hand calculation. N is the parameter count, W the ranks sharing the model,
p/c/r the bytes of model_dtype / param_dtype / reduce_dtype, a "unit" what one fully_shard owns (a
decoder layer, or the root: embeddings, head, final norm), S(x) a unit's shard (dim 0 split W ways,
padded). What each term is, read from torch 2.13's FSDP2 and AdamW:

  params        the master shard, S(N) * p. offload_policy: on the host. Manual param_offload: on the
                host between phases, on the device inside them.
  grads         the reduced shard, S(N) * p (FSDP2 casts the reduce output to the params' dtype);
                on the host with offload_policy. Plus, when reduce-scatter waits for the last
                micro-batch, every unsharded grad accumulated in reduce_dtype (FSDP2 upcasts it
                before accumulating): N * r, on the device in every mode.
  optimizer     AdamW's exp_avg and exp_avg_sq, 2 * S(N) * p. optimizer_offload streams one unit at
                a time through the device: 2 * S(largest unit) * p. offload_policy: on the host.
  step_temp     foreach AdamW's sqrt(exp_avg_sq) temporary, one more S(N) * p during the step (the
                step's peak is params + grads + both moments + this: 5x the shard in fp32);
                streamed: S(largest unit) * p. offload_policy steps on the host tensor by tensor.
  gathered      full params of the root (kept through forward and backward), of the layer
                computing and the one prefetched, in param_dtype; without reshard_after_forward
                every unit stays gathered. Plus the all-gather input: the largest unit's shard cast
                to param_dtype, and with offload_policy each tensor's shard copied from the host in
                model_dtype before its cast (one tensor at a time: the largest).
  root_grads    in backward, the root's unsharded grads in param_dtype (the LM head's is computed
                first and reduced last, with the root)
  reduce        a unit's reduce-scatter: its input in reduce_dtype (the unit's full size; FSDP2
                keeps one in flight) beside first the unit's grads (param_dtype, freed once copied
                in), then the output shard in reduce_dtype
  activations   what autograd saves per token and layer (8h + 4kv + 4i elements in param_dtype plus
                two fp32 RMSNorm inputs), the logits (param_dtype) and four fp32 copies of the
                response logits (scaled logits, two log-softmaxes for log-probs and entropy, the
                softmax); with gradient checkpointing only each layer's input plus one layer's
                activations during its recompute
  forward       a no-grad forward (log-probs, values, scores): one layer's transient (3i + 4h per
                token), the logits and three fp32 copies of the response logits (lm head only)
  attention_mask  sdpa/eager with a mask (padded rows, or packed rows' block-causal mask): the boolean
                (rows, S, S) mask, shared by all layers, and the additive copy sdpa makes of it on every
                layer call and saves for backward (param_dtype; one layer's with checkpointing)

The memory levers (issue 13) change these terms:
  sp_size       Ulysses sequence parallelism: a micro-batch of `micro` responses belongs to a group of
                sp ranks, each holding 1/sp of its tokens, so every per-token term above is per rank
                / sp (attention's exchanged q/k/v/output: the whole row for heads / sp, as many
                elements); with dynamic batching the group's token budget is sp x the per-GPU one
                (verl), so a rank holds the per-GPU budget. The attention mask still covers whole
                rows, made once as an additive mask shared by every layer (engine/ulysses.py). Not
                modelled: the repeated kv heads when kv_heads < sp (<= head_dim per token and layer).
  fsdp_size     HSDP: the model is sharded over fsdp_size ranks, not the world; the caller
                (plan_memory.py) passes that as `world`.
  fused         use_fused_kernels: no logits and no fp32 copies of them; the head works `chunk`
                tokens at a time (algos/chunked_logprob.py): two fp32 chunk x vocab tensors in forward
                and backward, plus in backward the head's gradient accumulated in fp32 when
                param_dtype is narrower (its param_dtype copy is root_grads).
  entropy       of the four fp32 response-logit copies, two are the entropy's (its log-softmax and
                softmax); entropy_from_logits_with_chunking replaces them by one chunk of 2048 tokens
                (measured with the CPU allocator on the update's head: the peak falls by two copies).
                entropy_checkpointing keeps nothing after forward but recomputes at the start of
                backward, when every activation is still alive: the same peak (measured: unchanged),
                so it does not change the estimate.
  activation_offload  what a training forward saves goes to host memory layer by layer (engine/
                activation_offload.py): on the device the layer computing and the one copied or
                prefetched (2 layers' saved tensors, with checkpointing 2 layer inputs plus the
                recomputed layer), the rest (layers - 1 groups; the last stays) on the host, each
                pinned tensor rounded up to a power of two.

The update's peak is the larger of backward's (state + gathered + the larger of: activations with
the root's grads and a layer's reduce; the root's reduce at the end of backward) and the step's
(state + step_temp). Host bytes: what the mode keeps there (and offloaded activations during the
update). Manual offload keeps its state in exactly sized page-locked buffers (utils/device.HostBuffer:
each slot on a 64-byte boundary); offload_policy's shards and grads are pinned by FSDP2 through the
caching host allocator, which rounds each tensor up to a power of two (GPU machines pin; CPU-only
machines cannot),
plus the whole model once, in model_dtype, while the engine loads it before sharding.

LoRA (`lora_rank` > 0, engine/lora.py): each adapted linear (out x in) gains A (rank x in) and
B (out x rank), kept in fp32 (PEFT upcasts 16-bit adapters); the critic's value head is trained as a
copy beside the frozen one (PEFT's modules_to_save). The units then hold frozen base weights and
trained tensors: params count both, while grads, grad_accum, optimizer, step_temp, root_grads, the
reduce-scatter buffers and the host's grads and moments count only the trained ones (FSDP2
reduce-scatters only parameters with gradients). Activations gain each adapter's rank-wide
intermediate per token; the frozen linear's input is still saved, now for the adapter beside it.
The CUDA context, NCCL buffers and allocator fragmentation are not modelled here (plan_memory.py
adds a per-process overhead; the planner keeps a headroom; scripts/gpu_check.py measures).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

from verl_lite.errors import InputError

DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
MODES = ("none", "param_optimizer_offload", "offload_policy")
HEADS = ("lm", "value")  # causal LM (actor, ref) | one output per token (critic, reward model)
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ADAPTER_BYTES = 4  # LoRA adapters are fp32 whatever model_dtype (PEFT's autocast_adapter_dtype)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


HOST_SLOT_ALIGN = 64  # utils/device.HostBuffer starts each slot on a 64-byte boundary


def pow2_ceil(nbytes: int) -> int:
    """The block the caching host allocator hands out for a pinned request of `nbytes`."""
    return 1 << (nbytes - 1).bit_length() if nbytes > 1 else nbytes


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    layers: int
    vocab: int
    intermediate: int
    heads: int
    kv_heads: int
    tie_word_embeddings: bool = False
    attention_bias: bool = True  # Qwen2 has q/k/v biases
    head: str = "lm"

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def out_features(self) -> int:
        return self.vocab if self.head == "lm" else 1

    def linears(self) -> dict[str, tuple[int, int]]:
        """(out, in) features of each linear layer of a decoder layer, by its module name."""
        h, kv, i = self.hidden, self.kv_dim, self.intermediate
        shapes = ((h, h), (kv, h), (kv, h), (h, h), (i, h), (i, h), (h, i))
        return dict(zip(LINEARS, shapes))

    def layer_tensors(self) -> list[tuple[int, int]]:
        """(dim 0, numel) of each parameter of one decoder layer: q, k, v (+ biases), o, gate, up, down, 2 norms."""
        h, kv = self.hidden, self.kv_dim
        out = [(o, o * i) for o, i in self.linears().values()]
        if self.attention_bias:
            out += [(h, h), (kv, kv), (kv, kv)]
        return out + [(h, h), (h, h)]

    def root_tensors(self) -> list[tuple[int, int]]:
        """What no decoder layer owns: embeddings, the final norm, the LM head unless tied (or the
        value head: one output and its bias)."""
        h = self.hidden
        out = [(self.vocab, self.vocab * h), (h, h)]
        if self.head == "value":
            return out + [(1, h), (1, 1)]
        return out if self.tie_word_embeddings else out + [(self.vocab, self.vocab * h)]

    @property
    def layer_params(self) -> int:
        return sum(n for _, n in self.layer_tensors())

    @property
    def root_params(self) -> int:
        return sum(n for _, n in self.root_tensors())

    @property
    def num_params(self) -> int:
        return self.layers * self.layer_params + self.root_params

    def all_tensors(self) -> list[tuple[int, int]]:
        return self.layers * self.layer_tensors() + self.root_tensors()


def shard_numel(tensors: list[tuple[int, int]], world: int) -> int:
    """Elements of one rank's shard: dim 0 split `world` ways, padded to equal chunks (FSDP2)."""
    return sum(_ceil(dim0, world) * (numel // dim0) for dim0, numel in tensors)


def read_shape(model_path: str, head: str = "lm", key: str = "actor_rollout_ref.model.path") -> ModelShape:
    """The shape fields of `<model_path>/config.json` (a HF model folder); `key` names the config key."""
    path = os.path.join(model_path, "config.json")
    if not os.path.isfile(path):
        raise InputError(
            f"{key}={model_path!r}: no config.json to plan from; set {key} to a HF model folder "
            "(the planner reads only its config.json)"
        )
    with open(path) as f:
        cfg = json.load(f)
    keys = ("hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size", "num_attention_heads")
    missing = [k for k in keys if k not in cfg]
    if missing:
        raise InputError(f"{path}: missing {missing}; the planner needs a decoder-only LM config")
    return ModelShape(
        hidden=cfg["hidden_size"],
        layers=cfg["num_hidden_layers"],
        vocab=cfg["vocab_size"],
        intermediate=cfg["intermediate_size"],
        heads=cfg["num_attention_heads"],
        kv_heads=cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2")),
        head=head,
    )


def _matches(spec, module: str) -> bool:
    """PEFT's matching of target_modules / exclude_modules: a regex over the whole module name, or a
    list of names a module name ends with ('all-linear': every linear of a decoder layer)."""
    if spec is None:
        return False
    if isinstance(spec, str):
        return spec == "all-linear" or re.fullmatch(spec, module) is not None
    return any(module == name or module.endswith(f".{name}") for name in spec)


def adapted_linears(target_modules, exclude_modules=None) -> tuple[str, ...]:
    """The decoder layer's linears LoRA adapts under PEFT's rules, for a Qwen2/Llama-style layer."""
    attention = ("q_proj", "k_proj", "v_proj", "o_proj")
    names = {n: f"model.layers.0.{'self_attn' if n in attention else 'mlp'}.{n}" for n in LINEARS}
    return tuple(
        n
        for n, full in names.items()
        if _matches(target_modules, full) and not _matches(exclude_modules, full)
    )


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


@dataclass
class EngineEstimate:
    """Bytes of one engine on one rank: on the device between phases (`resident`), at the peak of
    its training step (`update`, 0 when frozen) and of a no-grad forward (`forward`), and in host
    memory (`host`, steady; `host_load`, while loading before sharding). `terms`: every named term."""

    resident: int
    update: int
    forward: int
    host: int
    host_load: int
    terms: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Parts:
    """(dim 0, numel) of the tensors of one decoder layer and of the root, split into the frozen ones
    (model_dtype) and the trained ones (model_dtype; LoRA's adapters: fp32)."""

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
    p = _bytes(s.model_dtype)
    layer, root = shape.layer_tensors(), shape.root_tensors()
    if not s.lora_rank:
        if s.trains:
            return Parts([], [], layer, root, p)
        return Parts(layer, root, [], [], p)
    adapters = adapter_tensors(shape, s.lora_rank, s.lora_targets)
    head = [(1, shape.hidden), (1, 1)] if shape.head == "value" else []  # PEFT's modules_to_save copy
    return Parts(layer, root, adapters, head, ADAPTER_BYTES)


def _bytes(dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


FUSED_CHUNK_BYTES = 256 * 1024**2  # algos/chunked_logprob.py: one fp32 chunk x vocab tensor
ENTROPY_CHUNK = 2048  # tokens per chunk of entropy_from_logits_with_chunking


def fused_chunk_tokens(vocab: int) -> int:
    """Tokens per chunk of the fused head (the same rule as algos/chunked_logprob.py)."""
    return max(16, FUSED_CHUNK_BYTES // (4 * vocab))


def micro_tokens(s: EngineSetup, training: bool = True) -> tuple[int, int, int]:
    """(tokens, response tokens, rows) one rank holds of a micro-batch: a training one, or a no-grad
    forward's. With sp ranks per micro-batch each holds 1/sp of the tokens; a token budget (dynamic
    batching) is per rank (the group's is sp times it, as in verl)."""
    budget = s.tokens_per_micro if training else s.forward_tokens
    micro = s.micro if training else s.forward_micro
    if budget:
        rows = _ceil(budget * s.sp_size, s.seq_len)
        return budget, budget * s.response_len // s.seq_len, rows
    return _ceil(micro * s.seq_len, s.sp_size), _ceil(micro * s.response_len, s.sp_size), micro


def _layer_tensors(shape: ModelShape, s: EngineSetup, tokens: int) -> list[int]:
    """Bytes of each tensor one decoder layer saves for backward (without checkpointing)."""
    c = _bytes(s.param_dtype)
    h, kv, i = shape.hidden, shape.kv_dim, shape.intermediate
    lora = [tokens * s.lora_rank * len(s.lora_targets) * c] if s.lora_rank else []  # adapters' inner
    return [tokens * h * c] * 8 + [tokens * kv * c] * 4 + [tokens * i * c] * 4 + [tokens * h * 4] * 2 + lora


def mask_terms(shape: ModelShape, s: EngineSetup, rows: int) -> tuple[int, int]:
    """(shared, per layer) bytes of the attention mask of `rows` rows of seq_len: sdpa's additive copy
    per layer, or with sequence parallelism one additive mask shared by all layers."""
    square = rows * s.seq_len * s.seq_len
    if s.sp_size > 1:
        return square * _bytes(s.param_dtype), 0
    return square, square * _bytes(s.param_dtype)


def head_terms(shape: ModelShape, s: EngineSetup, tokens: int, response_tokens: int, training: bool) -> int:
    """The head's output and what the log-prob/entropy math keeps of it (see the module docstring)."""
    c, v = _bytes(s.param_dtype), shape.vocab
    if shape.head != "lm":
        return tokens * shape.out_features * c
    if s.fused:
        chunk = min(fused_chunk_tokens(v), tokens)
        widen = v * shape.hidden * 4 if training and c != 4 else 0
        return 2 * chunk * v * 4 + widen
    copy = response_tokens * v * 4
    chunk = min(ENTROPY_CHUNK, response_tokens) * v * 4
    if training:  # scaled logits and the log-probs' log-softmax, then the entropy's two
        entropy = chunk if s.entropy_chunking else 2 * copy
        return tokens * v * c + 2 * copy + entropy
    return tokens * v * c + 2 * copy + (chunk if s.entropy_chunking else copy)


def activation_terms(shape: ModelShape, s: EngineSetup) -> dict[str, int]:
    """What one training micro-batch's forward keeps for backward at its peak (`activations`), and
    with activation offload what waits on the host (`host_activations`)."""
    c = _bytes(s.param_dtype)
    tokens, response_tokens, rows = micro_tokens(s)
    shared, mask = mask_terms(shape, s, rows)
    layer = sum(_layer_tensors(shape, s, tokens)) + mask
    saved = [tokens * shape.hidden * c] if s.grad_checkpointing else [*_layer_tensors(shape, s, tokens), mask]
    on_device = min(shape.layers, 2) if s.activation_offload else shape.layers
    layers = on_device * sum(saved) + (layer if s.grad_checkpointing else 0)
    host = 0
    if s.activation_offload:
        rounded = [pow2_ceil(b) if s.pinned_host else b for b in saved if b]
        host = (shape.layers - 1) * sum(rounded)
    head = head_terms(shape, s, tokens, response_tokens, training=True)
    return {"activations": layers + shared + head + tokens * shape.hidden * c, "host_activations": host}


def activation_bytes(shape: ModelShape, s: EngineSetup) -> int:
    """What one training micro-batch's forward keeps for backward, at its peak."""
    return activation_terms(shape, s)["activations"]


def forward_bytes(shape: ModelShape, s: EngineSetup) -> int:
    """The transient peak of one no-grad forward micro-batch."""
    c = _bytes(s.param_dtype)
    tokens, response_tokens, rows = micro_tokens(s, training=False)
    shared, mask = mask_terms(shape, s, rows)
    layer = tokens * (3 * shape.intermediate + 4 * shape.hidden) * c + shared + mask
    return layer + head_terms(shape, s, tokens, response_tokens, training=False)


def _units(pt: Parts, world: int) -> dict[str, int]:
    """Shard numels: the whole model, a layer, the root, the largest unit, the largest tensor, and the
    same of the trained tensors (`trained`, `trained_layer`, `trained_root`, `trained_largest`)."""
    layers = pt.layer_frozen + pt.layer_trained
    roots = pt.root_frozen + pt.root_trained
    layer, root = shard_numel(layers, world), shard_numel(roots, world)
    t_layer, t_root = shard_numel(pt.layer_trained, world), shard_numel(pt.root_trained, world)
    return {
        "layer": layer,
        "root": root,
        "largest": max(layer, root),
        "tensor": max(shard_numel([t], world) for t in layers + roots),
        "trained_layer": t_layer,
        "trained_root": t_root,
        "trained_largest": max(t_layer, t_root),
    }


def _state_terms(shape: ModelShape, s: EngineSetup) -> dict[str, int]:
    """params, grads, grad_accum, optimizer, step_temp on the device during the update, and what stays
    between phases (resident)."""
    p, r = _bytes(s.model_dtype), _bytes(s.reduce_dtype)
    pt = parts(shape, s)
    u, b = _units(pt, s.world), pt.trained_bytes
    frozen = shard_numel(pt.layer_frozen, s.world) * shape.layers + shard_numel(pt.root_frozen, s.world)
    trained = u["trained_layer"] * shape.layers + u["trained_root"]
    n_trained = shape.layers * pt.full("layer_trained") + pt.full("root_trained")
    accum = n_trained * r if not s.reduce_every_micro else 0
    if s.mode == "offload_policy":
        return dict(params=0, grads=0, grad_accum=accum, optimizer=0, step_temp=0, resident=0)
    params, grads = frozen * p + trained * b, trained * b
    if s.mode == "param_optimizer_offload":
        unit = u["trained_largest"] * b
        return dict(
            params=params, grads=grads, grad_accum=accum, optimizer=2 * unit, step_temp=unit, resident=0
        )
    return dict(
        params=params,
        grads=grads,
        grad_accum=accum,
        optimizer=2 * grads,
        step_temp=grads,
        resident=params + 2 * grads,
    )


def _transient_terms(shape: ModelShape, s: EngineSetup) -> dict[str, int]:
    """gathered (+ all-gather input), unsharded grads, reduce-scatter buffers: the FSDP2 working set."""
    p, c, r = _bytes(s.model_dtype), _bytes(s.param_dtype), _bytes(s.reduce_dtype)
    pt = parts(shape, s)
    u = _units(pt, s.world)
    layer, root = pt.full("layer"), pt.full("root")
    full = shape.layers * layer + root if not s.reshard_after_forward else root + 2 * layer
    ag_input = u["largest"] * c if c != p or s.mode == "offload_policy" else 0
    copy_in = u["tensor"] * p if s.mode == "offload_policy" else 0

    def reduce(full_numel: int, shard: int) -> int:
        return full_numel * r + max(full_numel * c, shard * r) if full_numel else 0

    return {
        "gathered": full * c + ag_input + copy_in,
        "root_grads": pt.full("root_trained") * c,
        "reduce_layer": reduce(pt.full("layer_trained"), u["trained_layer"]),
        "reduce_root": reduce(pt.full("root_trained"), u["trained_root"]),
    }


def host_terms(shape: ModelShape, s: EngineSetup) -> dict[str, int]:
    """Host bytes per rank: offloaded state (offload_policy's pinned tensors rounded up, manual offload's
    HostBuffer slots aligned) and the load before sharding."""
    p = _bytes(s.model_dtype)
    pt = parts(shape, s)

    def shards(tensors: list[tuple[int, int]], nbytes: int) -> list[int]:
        return [(_ceil(d0, s.world) * (n // d0)) * nbytes for d0, n in tensors]

    frozen = shards(shape.layers * pt.layer_frozen + pt.root_frozen, p)
    trained = shards(shape.layers * pt.layer_trained + pt.root_trained, pt.trained_bytes)

    def pinned(tensors: list[int]) -> int:
        return sum(pow2_ceil(b) for b in tensors) if s.pinned_host else sum(tensors)

    def slots(tensors: list[int]) -> int:
        return sum(_ceil(b, HOST_SLOT_ALIGN) * HOST_SLOT_ALIGN for b in tensors)

    out = {"host_params": 0, "host_grads": 0, "host_optimizer": 0, "host_load": shape.num_params * p}
    if s.mode == "param_optimizer_offload":
        out["host_params"] = slots(frozen + trained)
        out["host_optimizer"] = 2 * slots(trained)  # both moments of every tensor
    elif s.mode == "offload_policy":
        out["host_params"] = pinned(frozen + trained)  # FSDP2 pins each padded shard
        out["host_grads"] = pinned(trained)  # the first micro-batch's grads land in pinned copies
        # moments (pageable) + a step temporary
        out["host_optimizer"] = 2 * sum(trained) + max(trained) if trained else 0
    return out


def estimate(shape: ModelShape, s: EngineSetup) -> EngineEstimate:
    if s.mode not in MODES:
        raise ValueError(f"offload mode {s.mode!r} is not one of {MODES}")
    state, work = _state_terms(shape, s), _transient_terms(shape, s)
    training = s.trains and (s.micro or s.tokens_per_micro)
    act = activation_terms(shape, s) if training else {"activations": 0, "host_activations": 0}
    acts = act["activations"]
    fwd = forward_bytes(shape, s) if s.forward_micro or s.forward_tokens else 0
    held = state["params"] + state["grads"] + state["grad_accum"] + state["optimizer"]
    in_layers = acts + work["root_grads"] + work["reduce_layer"]
    at_root = work["reduce_root"]  # the end of backward: activations are gone
    backward = held + work["gathered"] + max(in_layers, at_root)
    step = held + state["step_temp"]
    # a no-grad forward: the resident state, plus the params manual offload brings in for the phase
    in_phase = max(state["resident"], state["params"])
    host = {**host_terms(shape, s), "host_activations": act["host_activations"]}
    terms = {**state, **work, "activations": acts, "forward_activations": fwd, **host}
    return EngineEstimate(
        resident=state["resident"],
        update=max(backward, step) if s.trains else 0,
        forward=in_phase + work["gathered"] + fwd,
        host=host["host_params"] + host["host_grads"] + host["host_optimizer"] + host["host_activations"],
        host_load=host["host_load"],
        terms=terms,
    )
