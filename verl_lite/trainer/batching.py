"""Row layouts the driver prepares before dispatching to data-parallel workers.

`dp_minibatch_order` keeps global mini-batches independent of the world size. With
`trainer.balance_batch` (verl's sequence-length balancing) the rows of each mini-batch are also
shared out so that every rank gets about the same number of tokens: ranks meet at every collective,
so the rank with the most tokens sets the pace. Only the assignment of rows *within* a mini-batch
to ranks changes; which responses share an optimizer step does not, so the update is the same
(up to the order of floating-point sums).
"""

from __future__ import annotations

import torch


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
