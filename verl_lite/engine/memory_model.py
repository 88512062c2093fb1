"""Per-device memory of one training rank, estimated from the model's shape: the planner's math.

Pure arithmetic on a `ModelShape` (read from a HF config.json) and a `Setup` (world size, dtypes,
micro-batch, sequence length, offload mode). No torch, no FSDP: the planner (verl_lite/plan.py),
the trainer's auto-offload and scripts/bench_offload.py all use it, and tests check it against a
hand calculation. What each term assumes:

  params      sharded master params, model_dtype, N/W each             (host with offload_policy)
  grads       sharded grads, model_dtype, N/W each                      (host with offload_policy)
              + unsharded grads of every layer in param_dtype when reduce-scatter waits for the
              last micro-batch (set_requires_gradient_sync(False) keeps them until then)
  optimizer   AdamW's two moments, model_dtype, 2N/W                    (host with offload_policy;
              optimizer_offload streams one FSDP unit at a time, so only the largest unit's share)
  gathered    full params of the root unit (embeddings, head, final norm: FSDP2 keeps the root
              gathered through forward and backward), of two decoder layers (the one computing and
              the one prefetched) and one layer's unsharded grad, in param_dtype; without
              reshard_after_forward every layer stays gathered from forward to backward
  activations what autograd saves per token and layer (8h + 4kv + 4i elements in param_dtype plus
              two fp32 RMSNorm inputs), the logits (param_dtype) and four fp32 copies of the
              response logits (scaled logits, two log-softmaxes for log-probs and entropy, the
              softmax); with gradient checkpointing only
              each layer's input plus one layer's activations during its recompute
  rollout     the rollout's full copy of the weights in rollout.dtype (1/TP of it for vLLM with
              tensor_model_parallel_size > 1) and, while it generates, its KV cache for the rank's
              prompts x n at full length (with TP: 1/TP of the heads for TP times the sequences,
              the same bytes). The HF rollout's copy stays on the device through the
              update; vLLM with free_cache_engine sleeps (weights and KV cache leave the device)
              before the update, without it both stay
  ref         the reference model's sharded params, model_dtype, N/W, unless its fsdp_config
              offloads them (then they wait on the host between its uses)

param_offload alone saves memory only between phases (rollout, log-probs of another engine); it
is reported as the `between phases` figure. The estimates are approximations: the allocator's
fragmentation and CUDA context are not modelled, which is why the planner keeps a headroom and
scripts/gpu_check.sh compares them with measured peaks.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
MODES = ("none", "param_optimizer_offload", "offload_policy")


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

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        h, kv, i = self.hidden, self.kv_dim, self.intermediate
        attention = h * h + 2 * h * kv + h * h + (h + 2 * kv if self.attention_bias else 0)
        return attention + 3 * h * i + 2 * h  # q, k, v, o; gate, up, down; two RMSNorms

    @property
    def root_params(self) -> int:
        """What no decoder layer owns: embeddings, the LM head unless tied, the final norm."""
        embed = self.vocab * self.hidden
        return embed + (0 if self.tie_word_embeddings else embed) + self.hidden

    @property
    def num_params(self) -> int:
        return self.layers * self.layer_params + self.root_params


def read_shape(model_path: str) -> ModelShape:
    """The shape fields of `<model_path>/config.json` (a HF model folder)."""
    path = os.path.join(model_path, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"actor_rollout_ref.model.path={model_path!r}: no config.json to plan from")
    with open(path) as f:
        cfg = json.load(f)
    missing = [
        k
        for k in (
            "hidden_size",
            "num_hidden_layers",
            "vocab_size",
            "intermediate_size",
            "num_attention_heads",
        )
        if k not in cfg
    ]
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
    )


@dataclass(frozen=True)
class Setup:
    world: int  # data-parallel ranks the model is sharded over
    mode: str  # one of MODES
    micro: int  # responses per micro-batch
    seq_len: int  # prompt + response tokens per response
    response_len: int
    model_dtype: str = "fp32"
    param_dtype: str = "fp32"  # mixed_precision.param_dtype: what gathered layers and activations use
    grad_checkpointing: bool = False
    reshard_after_forward: bool = True
    reduce_every_micro: bool = True
    tokens_per_micro: int | None = None  # use_dynamic_bsz: the token budget replaces micro x seq_len
    rollout_dtype: str | None = "fp32"  # None: no rollout copy on this device
    rollout_sequences: int = 0  # responses generated at once on this rank (prompts x n)
    rollout_tp: int = 1  # vLLM tensor parallel size: each rank holds 1/TP of the rollout weights
    rollout_during_update: str = "weights"  # what the rollout keeps on the device during the update:
    # "weights" (HF), "none" (vLLM asleep: free_cache_engine), "weights_and_kv" (vLLM awake)
    ref_on_device: bool | None = None  # None: no reference model; False: its params offloaded


@dataclass
class Estimate:
    """Bytes on one device. `update` is the peak of the update phase, `between` what stays resident
    between phases (while the rollout generates), `host` what the offload mode keeps in host memory."""

    params: int
    grads: int
    optimizer: int
    gathered: int
    activations: int
    rollout: int
    ref: int
    host: int
    parts: dict[str, int] = field(default_factory=dict)

    @property
    def update(self) -> int:
        return (
            self.params
            + self.grads
            + self.optimizer
            + self.gathered
            + self.activations
            + self.parts["rollout_during_update"]
            + self.ref
        )

    @property
    def between(self) -> int:
        """Resident engine state plus the rollout's weights and KV cache while it generates."""
        return self.parts["resident_between"] + self.rollout + self.parts["kv_cache"] + self.ref

    @property
    def peak(self) -> int:
        return max(self.update, self.between)


def _bytes(dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def activation_bytes(shape: ModelShape, s: Setup) -> int:
    """What one micro-batch's forward keeps for backward, at its peak."""
    c = _bytes(s.param_dtype)
    tokens = s.tokens_per_micro or s.micro * s.seq_len
    response_tokens = tokens * s.response_len // s.seq_len if s.tokens_per_micro else s.micro * s.response_len
    h, kv, i = shape.hidden, shape.kv_dim, shape.intermediate
    per_layer = tokens * ((8 * h + 4 * kv + 4 * i) * c + 2 * h * 4)
    if s.grad_checkpointing:
        layers = shape.layers * tokens * h * c + per_layer
    else:
        layers = shape.layers * per_layer
    logits = tokens * shape.vocab * c + 4 * response_tokens * shape.vocab * 4
    return layers + logits + tokens * h * c  # + the embedding output


def estimate(shape: ModelShape, s: Setup) -> Estimate:
    if s.mode not in MODES:
        raise ValueError(f"offload mode {s.mode!r} is not one of {MODES}")
    p, c = _bytes(s.model_dtype), _bytes(s.param_dtype)
    n, w = shape.num_params, s.world
    shard = -(-n // w)  # ceil: FSDP2 pads the last shard
    largest_unit = max(shape.layer_params, shape.root_params)
    unsharded_grads = 0 if s.reduce_every_micro else n * c
    if s.reshard_after_forward:
        gathered = (shape.root_params + 2 * shape.layer_params) * c
    else:
        gathered = n * c
    gathered += shape.layer_params * c  # one layer's unsharded grad before its reduce-scatter
    host = 0
    if s.mode == "none":
        params, grads, optim = shard * p, shard * p + unsharded_grads, 2 * shard * p
        resident = params + optim
    elif s.mode == "param_optimizer_offload":
        params, grads = shard * p, shard * p + unsharded_grads
        optim = 2 * (-(-largest_unit // w)) * p  # the streamed step holds one unit's moments
        resident = 0
        host = 3 * shard * p  # params between phases, both moments
    else:  # offload_policy
        params, grads, optim = 0, unsharded_grads, 0
        resident = 0
        host = 4 * shard * p  # params, grads, both moments
    rollout = kv_cache = 0
    if s.rollout_dtype is not None:
        r = _bytes(s.rollout_dtype)
        rollout = -(-n // s.rollout_tp) * r
        # with TP a rank holds 1/TP of the KV heads for its TP group's sequences (TP x its own; see
        # rollout/tp_group.py): the same bytes as its own sequences at full width
        kv_cache = 2 * shape.layers * shape.kv_dim * s.rollout_sequences * s.seq_len * r
    during_update = {"weights": rollout, "none": 0, "weights_and_kv": rollout + kv_cache}
    if s.rollout_during_update not in during_update:
        raise ValueError(
            f"rollout_during_update={s.rollout_during_update!r} is not one of {list(during_update)}"
        )
    return Estimate(
        params=params,
        grads=grads,
        optimizer=optim,
        gathered=gathered,
        activations=activation_bytes(shape, s),
        rollout=rollout,
        ref=shard * p if s.ref_on_device else 0,
        host=host + (shard * p if s.ref_on_device is False else 0),
        parts={
            "resident_between": resident,
            "kv_cache": kv_cache,
            "rollout_during_update": during_update[s.rollout_during_update],
        },
    )
