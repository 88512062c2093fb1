"""A cheap fingerprint of each weight, and the trainer's side of it computed from its FSDP2 shards.

A weight sync is verified (rollout/weight_check.py) by comparing, per parameter, three float64
numbers -- the sum, the sum of squares and the sum of absolute values of its elements -- taken on
both sides from the same values: the trainer's parameter cast to the dtype it lands in (and scaled
where the engine scales it on arrival: vLLM's LoRA B), and the engine's parameter as it holds it.
All three add over any split of a tensor into disjoint pieces, so they survive what a sync does to
the layout: FSDP2 row shards on the trainer (each rank sums its shard, one all-reduce adds them),
vLLM's fused parameters (qkv_proj is the sum of q, k and v), its tensor-parallel slices and its
zero-padded vocabulary rows. Exact copies give the same numbers up to float64 summation order
(relative error ~1e-15: `RTOL`), while one optimizer step moves them far beyond that (an element
that moves by one bf16 ulp moves the sum by that ulp). A permutation of elements within a tensor
would not show; a sync that did not arrive does.

The trainer side costs one pass over the rank's own shards and one all-reduce of three numbers per
parameter: no gather.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from verl_lite.engine.weight_gather import _shard_mesh_dim

RTOL = 1e-12  # float64 sums of the same values in another order agree far closer than this


def fingerprint(t: torch.Tensor, dtype: torch.dtype | None = None, scale: float = 1.0) -> torch.Tensor:
    """(sum, sum of squares, sum of |x|) in float64 of `t` cast to `dtype` and multiplied by `scale`
    in that dtype (as the receiving side rounds them)."""
    x = t.detach()
    if dtype is not None and x.dtype != dtype:
        x = x.to(dtype)
    if scale != 1.0:
        x = x * scale
    x = x.reshape(-1).double()
    return torch.stack([x.sum(), x.square().sum(), x.abs().sum()]).cpu()


def agree(a: torch.Tensor, b: torch.Tensor, rtol: float = RTOL) -> bool:
    """Two fingerprints of the same values (summed in any order)."""
    scale = torch.stack([a[2], a[1], a[2]]).abs().maximum(torch.stack([b[2], b[1], b[2]]).abs())
    return bool(((a - b).abs() <= rtol * scale + 1e-300).all())


def shard_fingerprints(
    module: torch.nn.Module,
    forms: dict[str, tuple[torch.dtype | None, float]],
    sent_name: Callable[[str], str],
    device: torch.device,
) -> dict[str, torch.Tensor]:
    """The fingerprint of every parameter whose sent name (`sent_name(param name)`) `forms` lists,
    in that form's (dtype, scale), from each rank's FSDP2 shards: every rank calls it together with
    the same `forms` (one all-reduce per shard group; a parameter not row-sharded is read whole)."""
    out: dict[str, torch.Tensor] = {}
    sharded: dict = {}  # process group -> [(sent name, local fingerprint)]
    for name, param in module.named_parameters():
        sent = sent_name(name)
        if sent not in forms:
            continue
        dtype, scale = forms[sent]
        dim = _shard_mesh_dim(param)
        if dim is not None and param.device_mesh.size(dim) > 1:
            group = param.device_mesh.get_group(dim)
            sharded.setdefault(group, []).append((sent, fingerprint(param.to_local(), dtype, scale)))
        else:
            full = param.full_tensor() if isinstance(param, DTensor) else param
            out[sent] = fingerprint(full, dtype, scale)
    for group, rows in sharded.items():
        total = torch.stack([fp for _, fp in rows]).to(device)
        dist.all_reduce(total, group=group)
        out.update(zip([sent for sent, _ in rows], total.cpu()))
    return out
