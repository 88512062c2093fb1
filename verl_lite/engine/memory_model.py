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

The update's peak is the larger of backward's (state + gathered + the larger of: activations with
the root's grads and a layer's reduce; the root's reduce at the end of backward) and the step's
(state + step_temp). Host bytes: what the mode keeps there, each pinned tensor rounded up
to a power of two as the caching host allocator does (GPU machines pin; CPU-only machines cannot),
plus the whole model once, in model_dtype, while the engine loads it before sharding.
The CUDA context, NCCL buffers and allocator fragmentation are not modelled here (plan_memory.py
adds a per-process overhead; the planner keeps a headroom; scripts/gpu_check.py measures).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
MODES = ("none", "param_optimizer_offload", "offload_policy")
HEADS = ("lm", "value")  # causal LM (actor, ref) | one output per token (critic, reward model)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


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

    def layer_tensors(self) -> list[tuple[int, int]]:
        """(dim 0, numel) of each parameter of one decoder layer: q, k, v (+ biases), o, gate, up, down, 2 norms."""
        h, kv, i = self.hidden, self.kv_dim, self.intermediate
        out = [(h, h * h), (kv, kv * h), (kv, kv * h), (h, h * h), (i, i * h), (i, i * h), (h, h * i)]
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
        raise FileNotFoundError(f"{key}={model_path!r}: no config.json to plan from")
    with open(path) as f:
        cfg = json.load(f)
    keys = ("hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size", "num_attention_heads")
    missing = [k for k in keys if k not in cfg]
    if missing:
        raise ValueError(f"{path}: missing {missing}; the planner needs a decoder-only LM config")
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


def _bytes(dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def activation_bytes(shape: ModelShape, s: EngineSetup) -> int:
    """What one training micro-batch's forward keeps for backward, at its peak."""
    c = _bytes(s.param_dtype)
    tokens = s.tokens_per_micro or s.micro * s.seq_len
    response_tokens = tokens * s.response_len // s.seq_len if s.tokens_per_micro else s.micro * s.response_len
    h, kv, i = shape.hidden, shape.kv_dim, shape.intermediate
    per_layer = tokens * ((8 * h + 4 * kv + 4 * i) * c + 2 * h * 4)
    layers = shape.layers * tokens * h * c + per_layer if s.grad_checkpointing else shape.layers * per_layer
    logits = tokens * shape.out_features * c
    if shape.head == "lm":
        logits += 4 * response_tokens * shape.vocab * 4
    return layers + logits + tokens * h * c  # + the embedding output


def forward_bytes(shape: ModelShape, s: EngineSetup) -> int:
    """The transient peak of one no-grad forward micro-batch."""
    c = _bytes(s.param_dtype)
    tokens = s.forward_tokens or s.forward_micro * s.seq_len
    response_tokens = tokens * s.response_len // s.seq_len
    out = tokens * (3 * shape.intermediate + 4 * shape.hidden) * c + tokens * shape.out_features * c
    if shape.head == "lm":
        out += 3 * response_tokens * shape.vocab * 4
    return out


def _units(shape: ModelShape, world: int) -> dict[str, int]:
    """Shard numels: the whole model, a layer, the root, the largest unit, the largest tensor."""
    layer, root = shard_numel(shape.layer_tensors(), world), shard_numel(shape.root_tensors(), world)
    tensor = max(shard_numel([t], world) for t in shape.all_tensors())
    return {
        "all": shape.layers * layer + root,
        "layer": layer,
        "root": root,
        "largest": max(layer, root),
        "tensor": tensor,
    }


def _state_terms(shape: ModelShape, s: EngineSetup) -> dict[str, int]:
    """params, grads, grad_accum, optimizer, step_temp on the device during the update, and what stays
    between phases (resident)."""
    p, r = _bytes(s.model_dtype), _bytes(s.reduce_dtype)
    u = _units(shape, s.world)
    train = s.trains
    accum = shape.num_params * r if train and not s.reduce_every_micro else 0
    if s.mode == "offload_policy":
        return dict(params=0, grads=0, grad_accum=accum, optimizer=0, step_temp=0, resident=0)
    params = u["all"] * p
    if s.mode == "param_optimizer_offload":
        optim, temp = (2 * u["largest"] * p, u["largest"] * p) if train else (0, 0)
        return dict(
            params=params,
            grads=params if train else 0,
            grad_accum=accum,
            optimizer=optim,
            step_temp=temp,
            resident=0,
        )
    optim = 2 * params if train else 0
    return dict(
        params=params,
        grads=params if train else 0,
        grad_accum=accum,
        optimizer=optim,
        step_temp=params if train else 0,
        resident=params + optim,
    )


def _transient_terms(shape: ModelShape, s: EngineSetup) -> dict[str, int]:
    """gathered (+ all-gather input), unsharded grads, reduce-scatter buffers: the FSDP2 working set."""
    p, c, r = _bytes(s.model_dtype), _bytes(s.param_dtype), _bytes(s.reduce_dtype)
    u = _units(shape, s.world)
    full = shape.num_params if not s.reshard_after_forward else shape.root_params + 2 * shape.layer_params
    ag_input = u["largest"] * c if c != p or s.mode == "offload_policy" else 0
    copy_in = u["tensor"] * p if s.mode == "offload_policy" else 0

    def reduce(full_numel: int, shard: int) -> int:
        return full_numel * r + max(full_numel * c, shard * r) if s.trains else 0

    return {
        "gathered": full * c + ag_input + copy_in,
        "root_grads": shape.root_params * c if s.trains else 0,
        "reduce_layer": reduce(shape.layer_params, u["layer"]),
        "reduce_root": reduce(shape.root_params, u["root"]),
    }


def host_terms(shape: ModelShape, s: EngineSetup) -> dict[str, int]:
    """Host bytes per rank: offloaded state (pinned tensors rounded up) and the load before sharding."""
    p = _bytes(s.model_dtype)
    tensors = [(_ceil(d0, s.world) * (n // d0)) * p for d0, n in shape.all_tensors()]
    pinned = sum(pow2_ceil(b) for b in tensors) if s.pinned_host else sum(tensors)
    exact = sum(tensors)
    out = {"host_params": 0, "host_grads": 0, "host_optimizer": 0, "host_load": shape.num_params * p}
    if s.mode == "param_optimizer_offload":
        out["host_params"] = pinned
        out["host_optimizer"] = 2 * pinned if s.trains else 0  # each moment moved tensor by tensor
    elif s.mode == "offload_policy":
        out["host_params"] = pinned  # FSDP2 pins each padded shard
        if s.trains:
            out["host_grads"] = pinned  # the first micro-batch's grads land in pinned copies
            out["host_optimizer"] = 2 * exact + max(tensors)  # moments (pageable) + a step temporary
    return out


def estimate(shape: ModelShape, s: EngineSetup) -> EngineEstimate:
    if s.mode not in MODES:
        raise ValueError(f"offload mode {s.mode!r} is not one of {MODES}")
    state, work = _state_terms(shape, s), _transient_terms(shape, s)
    acts = activation_bytes(shape, s) if s.trains and (s.micro or s.tokens_per_micro) else 0
    fwd = forward_bytes(shape, s) if s.forward_micro or s.forward_tokens else 0
    held = state["params"] + state["grads"] + state["grad_accum"] + state["optimizer"]
    in_layers = acts + work["root_grads"] + work["reduce_layer"]
    at_root = work["reduce_root"]  # the end of backward: activations are gone
    backward = held + work["gathered"] + max(in_layers, at_root)
    step = held + state["step_temp"]
    # a no-grad forward: the resident state, plus the params manual offload brings in for the phase
    in_phase = max(state["resident"], state["params"])
    host = host_terms(shape, s)
    terms = {**state, **work, "activations": acts, "forward_activations": fwd, **host}
    return EngineEstimate(
        resident=state["resident"],
        update=max(backward, step) if s.trains else 0,
        forward=in_phase + work["gathered"] + fwd,
        host=host["host_params"] + host["host_grads"] + host["host_optimizer"],
        host_load=host["host_load"],
        terms=terms,
    )
