"""Row layouts the driver prepares before dispatching to data-parallel workers."""

from __future__ import annotations

import torch


def dp_minibatch_order(num_rows: int, mini_rows: int, world_size: int) -> torch.Tensor:
    """A row order under which chunking across ranks preserves the global mini-batches.

    Workers chunk the batch by rank and then cut their chunk into local mini-batches. For global
    mini-batch j (rows [j*M, (j+1)*M)) to be the union of every rank's local mini-batch j, rank r
    must receive, for each j in turn, rows [j*M + r*m, j*M + (r+1)*m) with m = M / world_size.
    Without this, which responses share an optimizer step would depend on the world size.
    """
    if num_rows % mini_rows or mini_rows % world_size:
        raise ValueError(f"{num_rows} rows cannot form mini-batches of {mini_rows} over {world_size} ranks")
    m = mini_rows // world_size
    order = [
        j * mini_rows + r * m + i
        for r in range(world_size)
        for j in range(num_rows // mini_rows)
        for i in range(m)
    ]
    return torch.tensor(order)
