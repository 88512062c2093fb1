"""The process layout of one role's ranks: how parameters are sharded and who shares data.

Two independent splits of the same `world` ranks:

- FSDP (`fsdp_config.fsdp_size`, verl's meaning): -1, or any size >= world, shards every parameter
  over all ranks (a 1-D mesh). A smaller size that divides world is HSDP: a 2-D mesh (replicate x
  shard) of shape (world / fsdp_size, fsdp_size); parameters are sharded within each group of
  fsdp_size consecutive ranks and replicated across groups, gradients are reduce-scattered inside a
  group and all-reduced across groups. fully_shard does both from the 2-D mesh; the result is the mean
  over all ranks either way, so the update is the same as with full sharding.
- Data (`ulysses_sequence_parallel_size` sp): consecutive groups of sp ranks share one micro-batch
  (sequence parallelism, engine/ulysses.py); the data-parallel size is world / sp and the batch is split
  that many ways. Ranks r and r' hold the same data iff r // sp == r' // sp.

Loss shares are normalised by counts over the data-parallel ranks (each sequence counted once), while
FSDP averages gradients over all `world` ranks, so the engine multiplies by `world`, not dp_size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


@dataclass
class Layout:
    fsdp_mesh: DeviceMesh  # 1-D ("fsdp",) or 2-D ("ddp", "fsdp") for HSDP
    dp_group: object  # ranks holding different data, one per sequence-parallel group (None if 1)
    sp_group: object  # ranks sharing a micro-batch (None if sp == 1)
    dp_size: int
    dp_rank: int
    sp_size: int
    sp_rank: int

    @property
    def world_size(self) -> int:
        return self.fsdp_mesh.size()

    @property
    def rank(self) -> int:
        """This rank among all `world_size` (not its data-parallel rank: with sp > 1 several ranks
        share a dp_rank)."""
        return self.dp_rank * self.sp_size + self.sp_rank

    @classmethod
    def of_mesh(cls, mesh: DeviceMesh) -> Layout:
        """A 1-D mesh taken as the whole layout: full sharding, no sequence parallelism."""
        if mesh.ndim != 1:
            raise ValueError("Layout.of_mesh takes a 1-D mesh; build a 2-D one with build_layout")
        group = mesh.get_group() if mesh.size() > 1 else None
        return cls(mesh, group, None, mesh.size(), mesh.get_local_rank(), 1, 0)


def fsdp_size_problem(world: int, fsdp_size: int, key: str) -> str | None:
    """fsdp_size must tile the world (start-up checks it with this rule, engine/checks.py)."""
    if fsdp_size < 0 or fsdp_size >= world or (fsdp_size > 0 and world % fsdp_size == 0):
        return None
    divisors = [d for d in range(1, world + 1) if world % d == 0]
    return f"{key}={fsdp_size} must divide the {world} workers, or be -1 (shard over all); use one of {divisors} or -1"


def sp_size_problem(world: int, sp_size: int, key: str) -> str | None:
    """ulysses_sequence_parallel_size must split the world into whole groups (start-up: engine/checks.py)."""
    if sp_size >= 1 and world % sp_size == 0:
        return None
    divisors = [d for d in range(1, world + 1) if world % d == 0]
    return f"{key}={sp_size} must divide the {world} workers (trainer.nnodes x trainer.n_gpus_per_node); use one of {divisors}"


def fsdp_mesh_shape(world: int, fsdp_size: int) -> tuple[int, ...]:
    """(world,) for full sharding, (world // fsdp_size, fsdp_size) for HSDP."""
    return (world,) if fsdp_size < 0 or fsdp_size >= world else (world // fsdp_size, fsdp_size)


def build_layout(device_type: str, fsdp_size: int = -1, sp_size: int = 1, key: str = "fsdp_config") -> Layout:
    """This rank's layout; every rank of the default group must call it together (groups are created)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    problem = fsdp_size_problem(world, fsdp_size, f"{key}.fsdp_size")
    problem = problem or sp_size_problem(world, sp_size, f"{key}.ulysses_sequence_parallel_size")
    if problem:
        raise ValueError(problem)
    shape = fsdp_mesh_shape(world, fsdp_size)
    names = ("fsdp",) if len(shape) == 1 else ("ddp", "fsdp")
    mesh = init_device_mesh(device_type, shape, mesh_dim_names=names)
    dp_size = world // sp_size
    sp_group = dp_group = None
    # new_group must be called by every rank for every group, in the same order
    for d in range(dp_size):
        group = dist.new_group(list(range(d * sp_size, (d + 1) * sp_size))) if sp_size > 1 else None
        if rank // sp_size == d:
            sp_group = group
    for s in range(sp_size):
        group = dist.new_group(list(range(s, world, sp_size))) if dp_size > 1 and sp_size > 1 else None
        if rank % sp_size == s:
            dp_group = group
    if sp_size == 1 and dp_size > 1:
        dp_group = dist.group.WORLD
    return Layout(mesh, dp_group, sp_group, dp_size, rank // sp_size, sp_size, rank % sp_size)


def heads_problem(
    heads: int | None, sp_size: int, key: str, model: str, limit: int | None = None
) -> str | None:
    """Sequence parallelism splits the query heads over its group: sp_size must divide them (start-up
    checks it with this rule, workers/checks.py). `limit`: the largest size worth proposing."""
    if sp_size <= 1 or not heads or heads % sp_size == 0:
        return None
    sizes = [d for d in range(1, heads + 1) if heads % d == 0 and (limit is None or d <= limit)]
    return f"{key}={sp_size} must divide the {heads} attention heads of {model}; use one of {sizes}"
