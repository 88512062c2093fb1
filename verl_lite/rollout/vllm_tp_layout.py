"""Where each of a vLLM parameter's values sits across the tensor-parallel ranks, for the sync check.

The check after every sync (rollout/weight_check.py) adds each engine parameter's fingerprint over
the engine's TP group and compares it with the trainer's whole tensor. That sum is exact only if
every value of the trainer's tensor is counted once, and vLLM does not slice every layer alike:

  sliced         ColumnParallelLinear / RowParallelLinear weights, column biases, the vocabulary
                 of VocabParallelEmbedding / ParallelLMHead (its padding rows are zeros: no sum);
  replicated     whatever a layer does not split (norms, a RowParallelLinear's bias, a
                 ReplicatedLinear, a layer built with disable_tp): every rank holds all of it;
  partly both    QKVParallelLinear with fewer KV heads than TP ranks: q is sliced, while each K/V
                 head is held by `num_kv_head_replicas` ranks;
  LoRA slots     a column layer's A is whole on every rank and its B sliced (a merged qkv's k/v B
                 by the KV head, so replicated like the base), a row layer's A sliced and B whole
                 (fully_sharded_loras slices the whole one too).

So each rank fingerprints the regions of its slice one fused part at a time (q, k, v; gate, up) and
divides each region's fingerprint by the number of ranks holding the same values: summed over the
group, every value counts exactly once (a replica count of 2 divides exactly; no tolerance is
added). A sync that reached only some replicas still shows: their average is not the new value.
A layer whose layout is not known here (MoE experts, quantized or other custom layers at TP > 1)
gets None: its parameters are counted unverified and named, never guessed. At TP = 1 every value
is held once and any layer's parts are known from its own sizes where it has them.
"""

from __future__ import annotations

import torch

from verl_lite.engine.weight_fingerprint import fingerprint


def _copies(module: torch.nn.Module, world: int) -> int:
    """The ranks of a `world`-rank TP group holding one slice of a layer split over its tp_size."""
    return world // getattr(module, "tp_size", world)


def base_regions(module: torch.nn.Module, attr: str, rows: int, world: int) -> list[tuple[int, int]] | None:
    """[(rows, copies)] along dim 0 of this rank's `module.<attr>` (`rows` long), one per fused part
    where the layer fuses several (q, k, v; merged columns), or None: a layout not known here."""
    from vllm.model_executor.layers.linear import (
        ColumnParallelLinear,
        LinearBase,
        MergedColumnParallelLinear,
        QKVParallelLinear,
        ReplicatedLinear,
        RowParallelLinear,
    )
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    def split(sizes: list[int], copies: list[int]) -> list[tuple[int, int]] | None:
        return list(zip(sizes, copies)) if sum(sizes) == rows else None  # e.g. a packed quantized weight

    if isinstance(module, QKVParallelLinear) and attr in ("weight", "bias"):
        c, kv = _copies(module, world), _copies(module, world) * module.num_kv_head_replicas
        q, k = module.num_heads * module.head_size, module.num_kv_heads * module.head_size
        return split([q, k, module.num_kv_heads * module.v_head_size], [c, kv, kv])
    if isinstance(module, MergedColumnParallelLinear) and attr in ("weight", "bias"):
        sizes = [size // module.tp_size for size in module.output_sizes]
        return split(sizes, [_copies(module, world)] * len(sizes))
    if isinstance(module, ReplicatedLinear) and attr in ("weight", "bias"):
        sizes = list(getattr(module, "output_sizes", None) or [rows])
        return split(sizes, [world] * len(sizes))
    if isinstance(module, ColumnParallelLinear) and attr in ("weight", "bias"):
        return [(rows, _copies(module, world))]
    if isinstance(module, RowParallelLinear) and attr in ("weight", "bias"):
        return [(rows, _copies(module, world) if attr == "weight" else world)]
    if isinstance(module, VocabParallelEmbedding) and attr in ("weight", "bias"):
        return [(rows, _copies(module, world))]
    if world == 1:
        return [(rows, 1)]
    from vllm.model_executor.model_loader.weight_utils import default_weight_loader

    param = getattr(module, attr)
    loader = getattr(param, "weight_loader", default_weight_loader)
    if isinstance(module, LinearBase) or loader is not default_weight_loader or hasattr(param, "output_dim"):
        return None  # sliced (or loaded) by a layer this file does not know
    return [(rows, world)]  # a plain parameter (a norm): every rank loads all of it


def layer_shares(module: torch.nn.Module, attr: str, tensor: torch.Tensor) -> list[torch.Tensor] | None:
    """Runs on the engine's worker: this rank's share of the fingerprint of each part of
    `module.<attr>` (`tensor`: the values it holds), or None where the layout is not known."""
    from vllm.distributed import get_tensor_model_parallel_world_size

    world = get_tensor_model_parallel_world_size()
    regions = base_regions(module, attr, tensor.shape[0] if tensor.dim() else 1, world)
    return None if regions is None else shares(tensor, regions)


def shares(tensor: torch.Tensor, regions: list[tuple[int, int]]) -> list[torch.Tensor]:
    """This rank's share of each region's fingerprint: the fingerprint of its rows over its copies."""
    t = tensor.detach()
    if t.dim() == 0:
        return [fingerprint(t) / regions[0][1]]
    out, start = [], 0
    for rows, copies in regions:
        out.append(fingerprint(t.narrow(0, start, rows)) / copies)
        start += rows
    return out


def lora_copies(module: torch.nn.Module, kind: str, index: int, world: int) -> int | None:
    """The ranks holding the same values of slice `index` of a LoRA layer's `kind` ("lora_A" or
    "lora_B") slot, or None: a LoRA layer whose layout is not known here."""
    if world == 1:
        return 1
    from vllm.lora.layers import (
        ColumnParallelLinearWithLoRA,
        MergedQKVParallelLinearWithLoRA,
        QKVParallelLinearWithLoRA,
        ReplicatedLinearWithLoRA,
        RowParallelLinearWithLoRA,
    )

    c = _copies(module, world)
    sharded = bool(getattr(module.lora_config, "fully_sharded_loras", False))
    if isinstance(module, ReplicatedLinearWithLoRA):
        return world
    if isinstance(module, RowParallelLinearWithLoRA):  # A sliced on its input; B whole unless sharded
        return c if kind == "lora_A" or sharded else world
    if isinstance(module, ColumnParallelLinearWithLoRA):  # A whole unless sharded; B sliced
        if kind == "lora_A":
            return c if sharded else world
        kv_replicas = getattr(module.base_layer, "num_kv_head_replicas", 1)
        if isinstance(module, MergedQKVParallelLinearWithLoRA):
            return c * kv_replicas if index > 0 else c
        if isinstance(module, QKVParallelLinearWithLoRA) and kv_replicas > 1:
            return None  # one B slice holding a sliced q beside replicated k/v
        return c
    return None
