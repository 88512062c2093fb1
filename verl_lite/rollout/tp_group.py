"""The ranks that share one tensor-parallel vLLM engine, and how their prompts meet.

With `tensor_model_parallel_size=t`, vLLM (external launcher) splits the worker's world of W ranks
into W/t TP groups of consecutive ranks (0..t-1, t..2t-1, ...; vllm/distributed/parallel_state.py
lays ranks out as ExternalDP x DP x PP x PCP x TP, TP innermost). Each rank of a group holds a
1/t slice of every layer, and the group runs one model: every rank must submit the same requests,
in the same order, with the same per-request seeds, or their schedulers diverge and the collectives
inside the model hang or abort.

The worker group still hands each rank its own chunk of prompts. Before generating, the ranks of a
TP group gather their chunks (a gloo subgroup of the worker's world: host tensors, works beside
NCCL too), generate the concatenation identically on every rank, and each keeps its own chunk's
rows. Every prompt row carries its origin (owner rank, row in the owner's chunk), from which its
seed is derived: the same prompt samples the same tokens whatever the TP size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from verl_lite.utils import device as dev


@dataclass
class GroupBatch:
    """The TP group's prompts (rows of every member, in rank order) and which of them are this rank's."""

    prompt_ids: torch.Tensor  # (sum of members' rows, max prompt width)
    prompt_mask: torch.Tensor
    origins: list[tuple[int, int]]  # (owner rank, row in the owner's chunk) per row
    own_rows: slice  # this rank's rows among them


def tp_size_problem(
    world: int, tp_size: int, sized_by: str = "trainer.nnodes x trainer.n_gpus_per_node"
) -> str | None:
    """Each engine spans tp_size consecutive ranks, so it must divide the world of the workers that
    hold the rollout (`sized_by`: the keys that size it; start-up checks it, rollout/checks.py)."""
    if tp_size >= 1 and world % tp_size == 0:
        return None
    return (
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp_size} must divide the {world} workers "
        f"({sized_by}): each engine spans {tp_size} consecutive ranks; use a divisor of {world}"
    )


class TPGroup:
    """This rank's TP group; `tp_size=1` (or a world of one) needs no communication."""

    def __init__(self, tp_size: int):
        world = dist.get_world_size() if dist.is_initialized() else 1
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        problem = tp_size_problem(world, tp_size)
        if problem:
            raise ValueError(problem)
        self.size = tp_size
        self.first = self.rank - self.rank % tp_size
        self.group = None
        if tp_size > 1:
            # new_group is collective over the whole world: every rank creates every group, in order
            for start in range(0, world, tp_size):
                group = dist.new_group(list(range(start, start + tp_size)), backend=dev.HOST_BACKEND)
                if start == self.first:
                    self.group = group

    def gather(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> GroupBatch:
        rows = prompt_ids.shape[0]
        if self.group is None:
            return GroupBatch(prompt_ids, prompt_mask, [(self.rank, i) for i in range(rows)], slice(0, rows))
        shape = torch.tensor(prompt_ids.shape, dtype=torch.long)
        shapes = [torch.empty_like(shape) for _ in range(self.size)]
        dist.all_gather(shapes, shape, group=self.group)
        max_rows, width = (max(int(s[d]) for s in shapes) for d in (0, 1))
        # chunks may differ in size: pad to the largest (mask 0), then cut each back to its own rows
        padded = torch.zeros((2, max_rows, width), dtype=torch.long)
        padded[0, :rows, : prompt_ids.shape[1]] = prompt_ids.cpu()
        padded[1, :rows, : prompt_ids.shape[1]] = prompt_mask.cpu()
        parts = [torch.empty_like(padded) for _ in range(self.size)]
        dist.all_gather(parts, padded, group=self.group)
        sizes = [int(s[0]) for s in shapes]
        ids = torch.cat([p[0, :n] for p, n in zip(parts, sizes)])
        mask = torch.cat([p[1, :n] for p, n in zip(parts, sizes)])
        origins = [(self.first + m, i) for m, n in enumerate(sizes) for i in range(n)]
        start = sum(sizes[: self.rank - self.first])
        return GroupBatch(ids, mask, origins, slice(start, start + rows))

    def gather_objects(self, obj) -> tuple[list, int]:
        """Every member's `obj` (picklable) in rank order, and this rank's index among them: how the
        ranks of a group meet for a multi-turn rollout's turn (each has its own list of requests)."""
        if self.group is None:
            return [obj], 0
        found = [None] * self.size
        dist.all_gather_object(found, obj, group=self.group)
        return found, self.rank - self.first
