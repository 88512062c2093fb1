"""Host memory of one engine on one rank: what its offload mode keeps there, and the load before sharding.

Manual offload (param_optimizer_offload) keeps its state in exactly sized page-locked buffers
(utils/device.HostBuffer: each slot on a 64-byte boundary). offload_policy's shards and grads are
pinned by FSDP2 through the caching host allocator, which rounds each tensor up to a power of two
(GPU machines pin; CPU-only machines cannot); its AdamW moments are pageable, plus one step
temporary. While an engine loads, the whole model sits on the host once, in its storage dtype
(model_shape.storage_dtype). Offloaded activations (engine/activation_offload.py) are pinned tensor
by tensor, with the same rounding (activations.py counts them).
"""

from __future__ import annotations

from verl_lite.engine.model_shape import ModelShape, ceil_div, dtype_bytes
from verl_lite.planner.engine_setup import EngineSetup, parts

HOST_SLOT_ALIGN = 64  # utils/device.HostBuffer starts each slot on a 64-byte boundary


def pow2_ceil(nbytes: int) -> int:
    """The block the caching host allocator hands out for a pinned request of `nbytes`."""
    return 1 << (nbytes - 1).bit_length() if nbytes > 1 else nbytes


def host_terms(shape: ModelShape, s: EngineSetup) -> dict[str, int]:
    """Host bytes per rank: offloaded state (offload_policy's pinned tensors rounded up, manual offload's
    HostBuffer slots aligned) and the load before sharding."""
    p = dtype_bytes(s.storage_dtype)
    pt = parts(shape, s)

    def shards(tensors: list[tuple[int, int]], nbytes: int) -> list[int]:
        return [(ceil_div(d0, s.world) * (n // d0)) * nbytes for d0, n in tensors]

    frozen = shards(shape.layers * pt.layer_frozen + pt.root_frozen, p)
    trained = shards(shape.layers * pt.layer_trained + pt.root_trained, pt.trained_bytes)

    def pinned(tensors: list[int]) -> int:
        return sum(pow2_ceil(b) for b in tensors) if s.pinned_host else sum(tensors)

    def slots(tensors: list[int]) -> int:
        return sum(ceil_div(b, HOST_SLOT_ALIGN) * HOST_SLOT_ALIGN for b in tensors)

    out = {"host_params": 0, "host_grads": 0, "host_optimizer": 0, "host_load": shape.num_params * p}
    if s.mode == "param_optimizer_offload":
        out["host_params"] = slots(frozen + trained)
        out["host_optimizer"] = 2 * slots(trained)  # both moments of every tensor
    elif s.mode == "offload_policy":
        out["host_params"] = pinned(frozen + trained)  # FSDP2 pins each padded shard
        out["host_grads"] = pinned(trained)  # the first micro-batch's grads land in pinned copies
        # moments (pageable) + a step temporary
        out["host_optimizer"] = 2 * sum(trained) + max(trained) if trained else 0
    return out
