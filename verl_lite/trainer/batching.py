"""Row layouts the driver prepares before dispatching to data-parallel workers.

`dp_minibatch_order` keeps global mini-batches independent of the world size. With
`trainer.balance_batch` (verl's sequence-length balancing) the rows of each mini-batch are also
shared out so that every rank gets about the same number of tokens: ranks meet at every collective,
so the rank with the most tokens sets the pace. Only the assignment of rows *within* a mini-batch
to ranks changes; which responses share an optimizer step does not, so the update is the same
(up to the order of floating-point sums). `Dispatch` sends every batch the driver gives a worker
group through one such order.
"""

from __future__ import annotations

import numpy as np
import torch

from verl_lite.config.common import dp_size
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.protocol import DataProto


def balanced_partition(seqlens: list[int], num_parts: int) -> list[list[int]]:
    """`num_parts` equal-size groups of indices with balanced sums (longest first into the lightest
    group that still has room); indices keep their order inside a group. len must divide."""
    if len(seqlens) % num_parts:
        raise ValueError(f"{len(seqlens)} rows cannot be split into {num_parts} equal parts")
    room = len(seqlens) // num_parts
    loads, parts = [0] * num_parts, [[] for _ in range(num_parts)]
    for i in sorted(range(len(seqlens)), key=lambda i: (-seqlens[i], i)):
        p = min((j for j in range(num_parts) if len(parts[j]) < room), key=lambda j: (loads[j], j))
        parts[p].append(i)
        loads[p] += seqlens[i]
    return [sorted(p) for p in parts]


def dp_minibatch_order(
    num_rows: int, mini_rows: int, world_size: int, seqlens: list[int] | None = None
) -> torch.Tensor:
    """A row order under which chunking across ranks preserves the global mini-batches.

    Workers chunk the batch by rank and then cut their chunk into local mini-batches. For global
    mini-batch j (rows [j*M, (j+1)*M)) to be the union of every rank's local mini-batch j, rank r
    must receive, for each j in turn, m = M / world_size rows of it: rows [j*M + r*m, j*M + (r+1)*m),
    or, given `seqlens` (tokens per row), rank r's part of a token-balanced partition of the M rows.
    Without this, which responses share an optimizer step would depend on the world size.
    """
    if num_rows % mini_rows or mini_rows % world_size:
        raise ValueError(f"{num_rows} rows cannot form mini-batches of {mini_rows} over {world_size} ranks")
    m = mini_rows // world_size
    parts = []  # parts[j][r]: the rows of global mini-batch j that rank r gets
    for j in range(num_rows // mini_rows):
        if seqlens is None:
            parts.append(
                [list(range(j * mini_rows + r * m, j * mini_rows + (r + 1) * m)) for r in range(world_size)]
            )
        else:
            local = balanced_partition(seqlens[j * mini_rows : (j + 1) * mini_rows], world_size)
            parts.append([[j * mini_rows + i for i in p] for p in local])
    return torch.tensor([i for r in range(world_size) for part in parts for i in part[r]])


def rank_token_loads(seqlens: torch.Tensor, order: torch.Tensor, world_size: int) -> list[int]:
    """Tokens each rank receives when the batch is dispatched in `order`."""
    return [int(chunk.sum()) for chunk in seqlens[order].chunk(world_size)]


def inverse_order(order: torch.Tensor) -> torch.Tensor:
    """The permutation that puts rows dispatched in `order` back in their original places."""
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(len(order))
    return inverse


def is_identity(order: torch.Tensor) -> bool:
    return bool(torch.equal(order, torch.arange(len(order))))


def in_order(data: DataProto, order: torch.Tensor) -> DataProto:
    """The rows of `data` in `order` (no copy when that is their order already: one rank, no balancing)."""
    return data if is_identity(order) else data[order]


class Dispatch:
    """The row order of every dispatch to a worker group: global mini-batches stay whole whatever the
    world size, and with trainer.balance_batch each rank gets a balanced share of tokens."""

    def __init__(self, config: PPOTrainerConfig, world_size: int):
        self.config, self.world_size = config, world_size

    def dp_size(self, role: str) -> int:
        """Data-parallel ranks of a role: the world over its ulysses_sequence_parallel_size (the
        ranks of a sequence-parallel group share rows; the worker group sends each chunk to all)."""
        return dp_size(self.config, role) if role in ("actor", "critic") else self.world_size

    def order(self, data: DataProto, mini_rows: int, role: str = "actor") -> torch.Tensor:
        seqlens = data.batch["attention_mask"].sum(-1).tolist() if self.config.trainer.balance_batch else None
        return dp_minibatch_order(len(data), mini_rows, self.dp_size(role), seqlens)

    def forward(
        self, method, data: DataProto, role: str = "actor", mini_rows: int | None = None
    ) -> DataProto:
        """A group method over the batch in mini-batches of `mini_rows` (None: the whole batch as one,
        as a forward), results in row order."""
        order = self.order(data, mini_rows or len(data), role)
        return in_order(method(in_order(data, order)), inverse_order(order))

    def balance_metrics(self, batch: DataProto) -> dict[str, float]:
        """verl's global_seqlen/*: tokens per rank with plain chunking and with the order used."""
        seqlens = batch.batch["attention_mask"].sum(-1)
        dp = self.dp_size("actor")
        plain = rank_token_loads(seqlens, torch.arange(len(batch)), dp)
        used = rank_token_loads(seqlens, self.order(batch, len(batch)), dp)
        return {
            "global_seqlen/min": min(plain),
            "global_seqlen/max": max(plain),
            "global_seqlen/minmax_diff": max(plain) - min(plain),
            "global_seqlen/balanced_min": min(used),
            "global_seqlen/balanced_max": max(used),
            "global_seqlen/mean": float(np.mean(used)),
        }
