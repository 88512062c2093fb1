"""`@register`: how a worker method's arguments are split across ranks and its results gathered.

ONE_TO_ALL        every worker gets the same arguments; the driver gets the list of results
DP_COMPUTE_PROTO  the DataProto argument is chunked into world_size equal parts, in rank order;
                  the driver gets DataProto.concat of the parts, so row order is preserved
"""

from __future__ import annotations

from enum import Enum

from verl_lite.protocol import DataProto

DISPATCH_ATTR = "_verl_lite_dispatch"


class Dispatch(Enum):
    ONE_TO_ALL = "one_to_all"
    DP_COMPUTE_PROTO = "dp_compute_proto"


def register(dispatch_mode: Dispatch = Dispatch.ONE_TO_ALL):
    def deco(fn):
        setattr(fn, DISPATCH_ATTR, dispatch_mode)
        return fn

    return deco


def dispatch_args(mode: Dispatch, world_size: int, args: tuple, kwargs: dict) -> list[tuple[tuple, dict]]:
    """Per-rank (args, kwargs)."""
    if mode is Dispatch.ONE_TO_ALL:
        return [(args, kwargs)] * world_size
    if mode is Dispatch.DP_COMPUTE_PROTO:
        if len(args) != 1 or kwargs or not isinstance(args[0], DataProto):
            raise TypeError("a DP_COMPUTE_PROTO method takes exactly one DataProto argument")
        return [((part,), {}) for part in args[0].chunk(world_size)]
    raise ValueError(f"unknown dispatch mode {mode}")


def collect_results(mode: Dispatch, results: list):
    if mode is Dispatch.ONE_TO_ALL:
        return results
    return DataProto.concat(results)
