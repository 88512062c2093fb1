"""`@register`: how a worker method's arguments are split across ranks and its results gathered.

ONE_TO_ALL        every worker gets the same arguments; the driver gets the list of results
ONE_PER_RANK      the one argument is a list with an item per rank: rank r gets item r (only its
                  own data travels to it); the driver gets the list of results
DP_COMPUTE_PROTO  the DataProto argument is chunked into equal parts, one per data-parallel rank, in
                  rank order; the driver gets DataProto.concat of the parts, so row order is preserved

A DP_COMPUTE_PROTO method may name a `mesh` (e.g. "actor"): the worker group then splits data the way
that mesh's ranks share it. By default every rank is its own data-parallel rank; with sequence
parallelism `ranks_per_shard` consecutive ranks hold the same rows (worker_group.set_data_layout), so
the batch is chunked world / ranks_per_shard ways, each chunk goes to all ranks of its group, and one
result per group (its first rank's) is gathered.
"""

from __future__ import annotations

from enum import Enum

from verl_lite.protocol import DataProto

DISPATCH_ATTR = "_verl_lite_dispatch"
MESH_ATTR = "_verl_lite_mesh"


class Dispatch(Enum):
    ONE_TO_ALL = "one_to_all"
    ONE_PER_RANK = "one_per_rank"
    DP_COMPUTE_PROTO = "dp_compute_proto"


def register(dispatch_mode: Dispatch = Dispatch.ONE_TO_ALL, mesh: str | None = None):
    def deco(fn):
        setattr(fn, DISPATCH_ATTR, dispatch_mode)
        setattr(fn, MESH_ATTR, mesh)
        return fn

    return deco


def dispatch_args(
    mode: Dispatch, world_size: int, args: tuple, kwargs: dict, ranks_per_shard: int = 1
) -> list[tuple[tuple, dict]]:
    """Per-rank (args, kwargs)."""
    if mode is Dispatch.ONE_TO_ALL:
        return [(args, kwargs)] * world_size
    if mode is Dispatch.ONE_PER_RANK:
        if len(args) != 1 or kwargs or len(args[0]) != world_size:
            raise TypeError(f"a ONE_PER_RANK method takes one list of {world_size} items, one per rank")
        return [((item,), {}) for item in args[0]]
    if mode is Dispatch.DP_COMPUTE_PROTO:
        if len(args) != 1 or kwargs or not isinstance(args[0], DataProto):
            raise TypeError("a DP_COMPUTE_PROTO method takes exactly one DataProto argument")
        parts = args[0].chunk(world_size // ranks_per_shard)
        return [((part,), {}) for part in parts for _ in range(ranks_per_shard)]
    raise ValueError(f"unknown dispatch mode {mode}")


def collect_results(mode: Dispatch, results: list, ranks_per_shard: int = 1):
    if mode in (Dispatch.ONE_TO_ALL, Dispatch.ONE_PER_RANK):
        return results
    return DataProto.concat(results[::ranks_per_shard])
