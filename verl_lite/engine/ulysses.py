"""Ulysses sequence parallelism: a group of `sp` ranks shares one micro-batch, each holding 1/sp of its tokens.

Every rank of a sequence-parallel group receives the same packed rows (engine/packing.py) and keeps a
contiguous 1/sp slice of each row's length, so embeddings, MLPs, norms and the head, and the activations
they save for backward, cost 1/sp per rank. Attention needs the whole row, so around it the group trades
sequence for heads with one all-to-all (DeepSpeed-Ulysses): before attention each rank sends every peer
that peer's heads of its own slice and receives its heads for the whole row; after attention the inverse
all-to-all brings back all heads for its own slice. Per-token results (log-probs, entropy, values) are
all-gathered along the sequence for the loss, so every rank of the group computes the same loss.

Hooked into transformers, not forked: `apply_ulysses` switches the model to the attention function
registered here as `ulysses_<base>` (base: sdpa or eager). Outside a `sequence_parallel(...)` context
it is exactly the base implementation (HF generate, a model used without SP); inside, it runs the
exchange above. Its registered mask function builds the block-causal mask of the *whole* padded rows
with masking_utils, from the full position_ids the context holds, exactly as the base path does for
unsharded packed rows (boundaries where a position does not follow the previous one).

GQA: the query heads must divide by sp. When the key/value heads do not, each is repeated (in place,
`repeat_interleave`) until their count is a multiple of sp, so every rank receives whole kv heads and
query head i still reads kv head i // (heads / kv_heads).

Gradients: the all-to-alls are autograd functions whose backward is the inverse exchange; the gather
of per-token results sends back to each rank the gradient of its own slice. Every rank of a group
computes the same loss, so the sum over the group of each rank's parameter gradient is the micro-batch's
gradient; FSDP's mean over all ranks is then undone by the engine's world-size multiplier, as for data
parallelism (fsdp_engine.py).

The context must cover both forward and backward when gradient checkpointing recomputes attention in
backward: the engine enters it around a micro-batch's forward *and* backward.
"""

from __future__ import annotations

import math
import sys
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, create_causal_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from verl_lite.engine.mesh import heads_problem

PREFIX = "ulysses_"
BASES = ("sdpa", "eager")


# --- collectives with autograd ---------------------------------------------------------------------
def _exchange(x: torch.Tensor, scatter_dim: int, gather_dim: int, group) -> torch.Tensor:
    """Cut `x` into `size` equal parts along scatter_dim, send part j to rank j, and concatenate the
    parts received (in rank order) along gather_dim."""
    size = dist.get_world_size(group)
    send = torch.stack(x.chunk(size, dim=scatter_dim)).contiguous()  # (size, *part)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return torch.cat(recv.unbind(0), dim=gather_dim)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scatter_dim, gather_dim, group):
        ctx.dims, ctx.group = (scatter_dim, gather_dim), group
        return _exchange(x, scatter_dim, gather_dim, group)

    @staticmethod
    def backward(ctx, grad):
        scatter_dim, gather_dim = ctx.dims
        return _exchange(grad, gather_dim, scatter_dim, ctx.group), None, None, None


def all_to_all(x: torch.Tensor, scatter_dim: int, gather_dim: int, group) -> torch.Tensor:
    """Trade dimension `scatter_dim` (split over the group) for `gather_dim` (concatenated)."""
    return _AllToAll.apply(x, scatter_dim, gather_dim, group)


class _GatherSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, group):
        ctx.dim, ctx.group = dim, group
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx, grad):
        rank = dist.get_rank(ctx.group)
        return grad.chunk(dist.get_world_size(ctx.group), dim=ctx.dim)[rank].contiguous(), None, None


def gather_seq(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    """All ranks' slices concatenated along `dim`; backward returns each rank its own slice's gradient
    (every rank computes the same loss from the gathered tensor, so nothing is summed)."""
    return _GatherSeq.apply(x, dim, group)


# --- the active micro-batch ------------------------------------------------------------------------
@dataclass
class _Active:
    group: object
    size: int
    position_ids: torch.Tensor  # (rows, L): the whole padded rows' positions, L a multiple of size


_ACTIVE: _Active | None = None


@contextmanager
def sequence_parallel(group, position_ids: torch.Tensor):
    """Attention of models set up by `apply_ulysses` runs sequence-parallel over `group` for rows whose
    full positions are `position_ids`; cover both forward and backward of a micro-batch."""
    global _ACTIVE
    previous = _ACTIVE
    _ACTIVE = _Active(group, dist.get_world_size(group), position_ids)
    try:
        yield
    finally:
        _ACTIVE = previous


# --- the registered attention and mask functions ---------------------------------------------------
class _LocalHeads:
    """The attention module as the base kernel must see it after the exchange: fewer query heads per
    kv head when kv heads were repeated."""

    def __init__(self, module, num_key_value_groups: int):
        self._module, self.num_key_value_groups = module, num_key_value_groups

    def __getattr__(self, name):
        return getattr(self._module, name)


class _BaseConfigView:
    """A model config seen with its base attention implementation (for masking_utils)."""

    def __init__(self, config, base: str):
        self._config, self._attn_implementation = config, base

    def __getattr__(self, name):
        return getattr(self._config, name)


def _base_of(config) -> str:
    return config._attn_implementation[len(PREFIX) :]


def _base_attention(module, base: str):
    if base == "eager":  # every transformers modeling file defines its own eager kernel
        return sys.modules[type(module).__module__].eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS[base]


def _repeat_kv_heads(x: torch.Tensor, size: int) -> torch.Tensor:
    """(b, kv, L, d) with kv repeated in place until it divides by `size` (kv head j -> copies j*r..)."""
    repeats = size // math.gcd(x.shape[1], size)
    return x if repeats == 1 else x.repeat_interleave(repeats, dim=1)


def ulysses_attention(module, query, key, value, attention_mask, **kwargs):
    """q (b, heads, L/sp, d), k/v (b, kv_heads, L/sp, d) -> (b, L/sp, heads, d), as the base returns."""
    base = _base_attention(module, _base_of(module.config))
    if _ACTIVE is None:
        return base(module, query, key, value, attention_mask, **kwargs)
    group, size = _ACTIVE.group, _ACTIVE.size
    key, value = _repeat_kv_heads(key, size), _repeat_kv_heads(value, size)
    query, key, value = (all_to_all(t, 1, 2, group) for t in (query, key, value))  # (b, h/sp, L, d)
    local = _LocalHeads(module, query.shape[1] // key.shape[1])
    kwargs["position_ids"] = _ACTIVE.position_ids
    out, _ = base(local, query, key, value, attention_mask, **kwargs)  # (b, L, h/sp, d)
    return all_to_all(out, 1, 2, group), None  # (b, L/sp, h, d)


def ulysses_mask(**kwargs):
    """The base mask; inside `sequence_parallel`, the mask of the whole rows from their full positions."""
    config = kwargs["config"]
    base = _base_of(config)
    if _ACTIVE is None:
        return ALL_MASK_ATTENTION_FUNCTIONS[base](**kwargs)
    pos = _ACTIVE.position_ids
    shape = (pos.shape[0], pos.shape[1], 0)  # masking_utils reads batch, length, dtype, device only
    mask = create_causal_mask(
        config=_BaseConfigView(config, base),
        inputs_embeds=torch.empty(shape, dtype=kwargs["dtype"], device=kwargs["device"]),
        attention_mask=None,
        past_key_values=None,
        position_ids=pos,
    )
    if base == "sdpa" and mask is not None and mask.dtype == torch.bool:
        # sdpa turns a boolean mask into an additive one on every call and saves that copy for
        # backward: one (L, L) float tensor per layer. Made once here (the same -inf / 0 values),
        # every layer shares it.
        additive = torch.zeros(mask.shape, dtype=kwargs["dtype"], device=mask.device)
        mask = additive.masked_fill_(~mask, float("-inf"))
    return mask


for _base in BASES:
    ALL_ATTENTION_FUNCTIONS.register(PREFIX + _base, ulysses_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(PREFIX + _base, ulysses_mask)


# --- rows in, per-token results out -----------------------------------------------------------------
@dataclass
class SeqShard:
    """This rank's slice of packed rows (rows, width), padded to a multiple of the group size."""

    group: object
    width: int  # the rows' length before padding
    position_ids: torch.Tensor  # (rows, padded): the whole rows, for the attention mask
    start: int
    stop: int

    def take(self, t: torch.Tensor, pad_value: int = 0) -> torch.Tensor:
        """This rank's slice of any (rows, width, ...) tensor laid out like the rows."""
        pad = self.position_ids.shape[1] - self.width
        if pad:
            t = torch.cat([t, t.new_full((t.shape[0], pad, *t.shape[2:]), pad_value)], dim=1)
        return t[:, self.start : self.stop]

    def gather(self, local: torch.Tensor) -> torch.Tensor:
        """(rows, width/sp, ...) per-token results of every rank -> (rows, width, ...), padding cut."""
        return gather_seq(local, 1, self.group)[:, : self.width]


def shard_rows(position_ids: torch.Tensor, group) -> SeqShard:
    """The slice of rows with these (rows, width) positions that this rank of `group` computes. The
    padding is a block of its own (positions restart at 0), so no real token attends to it."""
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    rows, width = position_ids.shape
    pad = (-width) % size
    pad_pos = torch.arange(pad, device=position_ids.device, dtype=position_ids.dtype).expand(rows, pad)
    full = torch.cat([position_ids, pad_pos], dim=1)
    local = full.shape[1] // size
    return SeqShard(group, width, full, rank * local, (rank + 1) * local)


def apply_ulysses(model: torch.nn.Module, sp_size: int, key: str) -> None:
    """Switch `model` to the sequence-parallel attention (a no-op for sp_size 1); `key` names the
    config key in errors."""
    if sp_size == 1:
        return
    config = model.config
    problem = heads_problem(config.num_attention_heads, sp_size, key, "the model")
    if problem:
        raise ValueError(problem)
    if "sliding_attention" in (getattr(config, "layer_types", None) or []):
        raise ValueError(f"{key}={sp_size}: sliding-window attention layers are not supported with SP")
    base = config._attn_implementation
    if base.startswith(PREFIX):
        return
    if base not in BASES:
        raise ValueError(
            f"{key}={sp_size}: attention implementation {base!r} is not supported with sequence "
            f"parallelism; use one of {BASES} (model.override_config or the model's config.json)"
        )
    model.set_attn_implementation(PREFIX + base)
