"""Full weights from FSDP2 shards for the rollout: one all-gather per bucket of parameters.

The hybrid engine's weight sync needs every parameter unsharded, once per step. Gathering them one
`full_tensor()` at a time costs one collective (and its launch and latency) per parameter -- a few
hundred for a 7B model -- in the master dtype (fp32). Here the parameters are taken a bucket at a
time (consecutive parameters up to `bucket_bytes` of full weights): each rank copies its shards of
the bucket, cast to the rollout's dtype, into one flat buffer, one all-gather fills a
(world, bucket) buffer, and each full parameter is read out of it. Casting before the gather is
exact (a per-element rounding either way) and halves the bytes for a bf16 rollout.

FSDP2 shards a parameter of N rows into `world` chunks of ceil(N / world) rows (the last ones
shorter or empty, torch.chunk's split); every rank pads its chunk to that size, so the gathered
chunks laid end to end are the N rows followed by padding. On an HSDP mesh (replicate x shard) the
gather runs over the shard dimension's group only: each replica group already holds every row.
Parameters sharded any other way (or not at all) are gathered the plain way.

Host-resident shards (offload_policy) are copied into the device buffer as part of the packing.

The one collective is `dist.all_gather_single` where torch has it (2.13 and later) and
`dist.all_gather_into_tensor` before (the GPU machine's torch 2.11): both lay every rank's flat
buffer end to end in rank order, so the result is the same (`flat_all_gather`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Replicate, Shard


def flat_all_gather(dist_module=dist):
    """The collective that writes every rank's equal-sized flat buffer, end to end in rank order,
    into one output buffer: all_gather_single (torch >= 2.13), else all_gather_into_tensor."""
    return getattr(dist_module, "all_gather_single", None) or dist_module.all_gather_into_tensor


ALL_GATHER = flat_all_gather()  # chosen once, for the torch this process runs


def _shard_mesh_dim(param) -> int | None:
    """The mesh dimension `param` is row-sharded over, when every other one replicates it."""
    if not isinstance(param, DTensor):
        return None
    sharded = [i for i, p in enumerate(param.placements) if p == Shard(0)]
    others = all(p == Replicate() for i, p in enumerate(param.placements) if i not in sharded)
    return sharded[0] if len(sharded) == 1 and others else None


def _is_dim0_sharded(param) -> bool:
    return _shard_mesh_dim(param) is not None


def _crosses_ranks(param) -> bool:
    """Whether `full_tensor()` of `param` runs a collective: a DTensor split over a mesh dimension
    of more than one rank (torch skips the communication over a dimension of one)."""
    if not isinstance(param, DTensor):
        return False
    mesh = param.device_mesh
    return any(not p.is_replicate() and mesh.size(i) > 1 for i, p in enumerate(param.placements))


def _chunk_rows(num_rows: int, world: int) -> int:
    return -(-num_rows // world)


def buckets(named_params: list[tuple[str, torch.Tensor]], bucket_bytes: int, dtype) -> Iterator[list]:
    """Consecutive (name, param) lists of at most `bucket_bytes` full bytes (a bigger parameter
    is a bucket of its own) on one mesh, in one dtype; a parameter that is not dim-0 sharded is a
    bucket of its own."""
    bucket, size = [], 0
    for name, param in named_params:
        nbytes = param.numel() * (dtype or param.dtype).itemsize
        plain = not _is_dim0_sharded(param)
        other = bucket and (
            param.dtype != bucket[0][1].dtype
            or param.device_mesh is not bucket[0][1].device_mesh
            or param.placements != bucket[0][1].placements
        )
        if bucket and (plain or other or size + nbytes > bucket_bytes):
            yield bucket
            bucket, size = [], 0
        bucket.append((name, param))
        size += nbytes
        if plain:
            yield bucket
            bucket, size = [], 0
    if bucket:
        yield bucket


def _gather_plain(name: str, param, device: torch.device, dtype) -> tuple[str, torch.Tensor]:
    if isinstance(param, DTensor):
        local = param.to_local()
        if local.device != device:  # host-resident shard (offload_policy): gather on the device
            param = DTensor.from_local(
                local.to(device, non_blocking=True),
                param.device_mesh,
                param.placements,
                run_check=False,
                shape=param.shape,
                stride=param.stride(),
            )
        full = param.full_tensor()
    else:
        full = param.to(device)
    return name, full.detach().to(dtype or full.dtype)


def gather_bucket(bucket: list, device: torch.device, dtype, stats: dict) -> list[tuple[str, torch.Tensor]]:
    """The full tensors of one bucket of dim-0-sharded parameters, with one all-gather."""
    first = bucket[0][1]
    dim = _shard_mesh_dim(first)
    world, group = first.device_mesh.size(dim), first.device_mesh.get_group(dim)
    out_dtype = dtype or bucket[0][1].dtype
    layout, total = [], 0  # (name, param, offset, chunk numel)
    for name, param in bucket:
        row = math.prod(param.shape[1:])
        chunk = _chunk_rows(param.shape[0], world) * row
        layout.append((name, param, total, chunk))
        total += chunk
    # one rank: its shards are the full params and fill the buffer (no padding), which is the result
    local = (torch.empty if world == 1 else torch.zeros)(total, dtype=out_dtype, device=device)
    for _, param, offset, _ in layout:
        shard = param.to_local().detach().reshape(-1)
        local[offset : offset + shard.numel()].copy_(shard, non_blocking=True)
    if world == 1:
        gathered = local.view(1, total)
    else:
        gathered = torch.empty(world * total, dtype=out_dtype, device=device)
        ALL_GATHER(gathered, local, group=group)  # the ranks' buffers end to end
        gathered = gathered.view(world, total)
        stats["collectives"] = stats.get("collectives", 0) + 1
    out = []
    for name, param, offset, chunk in layout:
        rows = gathered[:, offset : offset + chunk].reshape(-1)[: param.numel()]
        out.append((name, rows.view(param.shape)))
    return out


def iter_full_params(
    module: torch.nn.Module,
    device: torch.device,
    bucket_bytes: int | None = None,
    dtype: torch.dtype | None = None,
    stats: dict | None = None,
    select: Callable[[str], bool] | None = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor) for every parameter whose name `select` accepts (all by default), in
    `dtype` (None: the master dtype); every rank must iterate together. A bucket is gathered only
    when the consumer asks for its first tensor; parameters left out are never gathered.
    `bucket_bytes=None` gathers one parameter per collective."""
    stats = {} if stats is None else stats
    named = [(n, p) for n, p in module.named_parameters() if select is None or select(n)]
    for bucket in buckets(named, bucket_bytes or 0, dtype):
        if _is_dim0_sharded(bucket[0][1]):
            yield from gather_bucket(bucket, device, dtype, stats)
        else:
            stats["collectives"] = stats.get("collectives", 0) + int(_crosses_ranks(bucket[0][1]))
            yield _gather_plain(*bucket[0], device, dtype)
