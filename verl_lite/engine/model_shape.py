"""A decoder-only model's shape, read from its HF config.json: what the memory model counts.

`ModelShape` lists the tensors of one decoder layer and of the root (embeddings, final norm, LM or
value head) as (dim 0, numel) pairs, which is all FSDP2's sharding needs to know: `shard_numel` is
one rank's padded shard of them. `adapted_linears` applies PEFT's target/exclude rules to a layer's
linears, so the planner counts the same LoRA adapters the engine builds. No torch: the planner runs
before any worker (and on machines without a GPU).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from verl_lite.errors import InputError

DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
HEADS = ("lm", "value")  # causal LM (actor, ref) | one output per token (critic, reward model)
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def dtype_bytes(dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def storage_dtype(model_dtype: str, param_dtype: str, trains: bool) -> str:
    """The dtype an engine keeps its sharded weights in. An engine that trains keeps model_dtype (the
    master weights its optimizer updates, fp32 by default). A frozen one (the reference, a reward
    model) never updates them, and FSDP2 casts every gather to the compute dtype
    (mixed_precision.param_dtype) anyway, so from an fp32 model_dtype it keeps them in that compute
    dtype: the same numbers (one round-to-nearest cast either way) in half the bytes for bf16. verl
    builds its reward model in bf16, and its reference in bf16 where fsdp_config.model_dtype is unset."""
    return param_dtype if not trains and model_dtype in ("fp32", "float32") else model_dtype


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
    head: str = "lm"  # one of HEADS

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
    return sum(ceil_div(dim0, world) * (numel // dim0) for dim0, numel in tensors)


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


def module_matches(spec, module: str) -> bool:
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
        if module_matches(target_modules, full) and not module_matches(exclude_modules, full)
    )
