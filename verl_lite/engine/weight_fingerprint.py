"""A cheap fingerprint of each weight, and the trainer's side of it computed from its FSDP2 shards.

A weight sync is verified (rollout/weight_check.py) by comparing, per parameter, two float64
numbers -- the sum and the sum of squares of its elements -- taken on both sides from the same
values: the trainer's parameter cast to the dtype it lands in (and scaled where the engine scales
it on arrival: vLLM's LoRA B), and the engine's parameter as it holds it. Both add over any split
of a tensor into disjoint pieces and ignore zeros, so they survive what a sync does to the layout:
FSDP2 row shards on the trainer (each rank sums its shard, one all-reduce adds them), vLLM's fused
parameters (qkv_proj's are q's + k's + v's), its tensor-parallel slices and its zero-padded
vocabulary rows. Exact copies give the same numbers up to float64 summation order (measured:
~5e-16 relative; `RTOL` is 1e-14), while a sync that did not arrive leaves them where the old
weights had them: one element of a 2M-element tensor moved by 1e-6 is seen. A permutation of
elements within a tensor would not show; that is not how a sync fails.

The trainer side costs one pass over the rank's own shards and one all-reduce of three numbers per
parameter (the element count rides along, for the tolerance): no gather, but for LoRA's lora.merge
the adapters' A (rank x in each), gathered whole.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from verl_lite.engine.lora import merged_weight
from verl_lite.engine.weight_gather import _crosses_ranks, _shard_mesh_dim

RTOL = 1e-14  # float64 sums of the same values in another order: ~5e-16 measured
CHUNK = 1 << 16  # elements per float64 pass on a CPU (512 KiB: stays in cache)


def fingerprint(
    t: torch.Tensor, dtype: torch.dtype | None = None, scale: float = 1.0, via: torch.dtype | None = None
) -> torch.Tensor:
    """(sum, sum of squares, number of elements) in float64 of `t` cast to `dtype` and multiplied by
    `scale` in that dtype (as the receiving side rounds them), on the host. `via`: the dtype the
    values travelled in before they landed in `dtype` (the sync's cast: a bf16 rollout's bias that
    vLLM's CPU kernel keeps in fp32 holds bf16-rounded values), cast to first.

    On a CPU a chunk of CHUNK elements at a time, through float64 buffers reused for the whole
    tensor (no allocation per chunk): in cache, and about two memory copies' time when measured
    on a quiet host (docs/hybrid_engine.md).
    """
    x = t.detach().reshape(-1)
    n = x.numel()
    if n == 0:
        return torch.zeros(3, dtype=torch.float64)
    chunk = min(CHUNK, n) if x.device.type == "cpu" else n
    if via is not None and via not in (x.dtype, dtype):
        x = x.to(via)  # one copy of the tensor in the (narrower) dtype it was sent in
    cast = dtype is not None and x.dtype != dtype
    wide = torch.empty(chunk, dtype=torch.float64, device=x.device)
    squared = torch.empty_like(wide)
    narrow = (
        torch.empty(chunk, dtype=dtype if cast else x.dtype, device=x.device)
        if cast or scale != 1.0
        else None
    )
    total = squares = 0.0
    for piece in x.split(chunk):
        size = piece.numel()
        if narrow is not None:  # round to the landed dtype (and scale in it) as the receiver does
            piece = narrow[:size].copy_(piece)
            if scale != 1.0:
                piece.mul_(scale)
        d = wide[:size].copy_(piece)
        total += d.sum().item()
        squares += torch.mul(d, d, out=squared[:size]).sum().item()
    return torch.tensor([total, squares, float(n)], dtype=torch.float64)


def agree(a: torch.Tensor, b: torch.Tensor, rtol: float = RTOL) -> bool:
    """Two fingerprints of the same values, summed in any order (and zero padding anywhere: the
    element counts are not compared). The sum's tolerance is scaled by sqrt(n x sum of squares),
    the bound on the sum of |x| that a cancelling sum would otherwise be measured against."""
    squares = max(abs(a[1].item()), abs(b[1].item()))
    count = max(a[2].item(), b[2].item())
    sum_ok = abs(a[0].item() - b[0].item()) <= rtol * (count * squares) ** 0.5 + 1e-300
    return sum_ok and abs(a[1].item() - b[1].item()) <= rtol * squares + 1e-300


def shard_fingerprints(
    module: torch.nn.Module,
    forms: dict[str, tuple[torch.dtype | None, float, torch.dtype | None]],
    sent_name: Callable[[str], str],
    device: torch.device,
    merged: dict[str, tuple[str, str, float]] | None = None,
) -> dict[str, torch.Tensor]:
    """The fingerprint of every parameter whose sent name (`sent_name(param name)`) `forms` lists,
    in that form's (dtype, scale, via), from each rank's FSDP2 shards: every rank calls it together
    with the same `forms` (one all-reduce per shard group; a parameter not row-sharded is read
    whole). `merged` ({W: (A, B, scale)}, LoRA's lora.merge): W's values are W + scale * B @ A, from
    this rank's rows of W and B (sharded alike: the same row count) and the whole A."""
    out: dict[str, torch.Tensor] = {}
    sharded: dict = {}  # process group -> [(sent name, local fingerprint)]
    params = dict(module.named_parameters())
    merged = merged or {}
    # every merged layer's whole A first, in one order on every rank (collectives), whatever `forms`
    # lists (each rank's engine reports its own)
    whole_a = {a: _whole(params[a]) for a, _, _ in merged.values()}
    for name, param in params.items():
        sent = sent_name(name)
        if sent not in forms:
            continue
        dtype, scale, via = forms[sent]
        dim = _shard_mesh_dim(param)
        local = dim is not None and param.device_mesh.size(dim) > 1
        values = param.to_local() if local else _whole(param)
        if name in merged:
            a, b, lora_scale = merged[name]
            rows = params[b].to_local() if local else _whole(params[b])
            values = merged_weight(values, rows, whole_a[a], lora_scale)
        if local:
            group = param.device_mesh.get_group(dim)
            sharded.setdefault(group, []).append((sent, fingerprint(values, dtype, scale, via)))
        else:
            out[sent] = fingerprint(values, dtype, scale, via)
    for group, rows in sharded.items():
        total = torch.stack([fp for _, fp in rows]).to(device)
        dist.all_reduce(total, group=group)
        out.update(zip([sent for sent, _ in rows], total.cpu()))
    return out


def _whole(param) -> torch.Tensor:
    """The parameter's full value; full_tensor() costs ~0.5 ms of DTensor dispatch even where no rank
    holds another part, so only where one does."""
    whole = isinstance(param, DTensor) and _crosses_ranks(param)
    return param.full_tensor() if whole else getattr(param, "_local_tensor", param)
