"""How a batch on one rank is cut into micro-batches: fixed row counts or a token budget.

With `use_dynamic_bsz`, rows are grouped so that each micro-batch holds at most
`max_token_len` real tokens (attention_mask sum), which keeps memory flat when lengths vary.
FSDP2 all-gathers in every forward, so all ranks must run the same number of micro-batches:
the caller agrees on the largest count over ranks (`num_groups`) and every rank re-packs into
that many groups. Exactness does not depend on the grouping: losses are shares of mini-batch-wide
counts (algos/loss_agg.py), so any partition gives the same sum.
"""

from __future__ import annotations

import torch


def fixed_groups(num_rows: int, micro_size: int) -> list[list[int]]:
    return [list(range(i, min(i + micro_size, num_rows))) for i in range(0, num_rows, micro_size)]


def count_token_groups(token_counts: list[int], max_token_len: int) -> int:
    """Micro-batches first-fit-decreasing needs to keep each under the budget."""
    bins: list[int] = []
    for n in sorted(token_counts, reverse=True):
        if n > max_token_len:
            raise ValueError(
                f"a sequence of {n} tokens exceeds the token budget {max_token_len}; raise "
                "ppo_max_token_len_per_gpu / log_prob_max_token_len_per_gpu to at least prompt+response length"
            )
        for i, used in enumerate(bins):
            if used + n <= max_token_len:
                bins[i] += n
                break
        else:
            bins.append(n)
    return len(bins)


def balanced_groups(token_counts: list[int], num_groups: int) -> list[list[int]]:
    """`num_groups` groups of row indices with balanced token sums (longest first into the
    lightest group); rows keep their original order inside a group. Needs num_groups <= rows."""
    if num_groups > len(token_counts):
        raise ValueError(f"cannot make {num_groups} micro-batches from {len(token_counts)} rows")
    loads = [0] * num_groups
    groups: list[list[int]] = [[] for _ in range(num_groups)]
    order = sorted(range(len(token_counts)), key=lambda i: (-token_counts[i], i))
    for i in order:
        g = min(range(num_groups), key=lambda j: (loads[j], j))
        groups[g].append(i)
        loads[g] += token_counts[i]
    return [sorted(g) for g in groups]


def token_counts(attention_mask: torch.Tensor) -> list[int]:
    return attention_mask.sum(-1).tolist()
