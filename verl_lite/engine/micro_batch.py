"""How a batch on one rank is cut into micro-batches, planned on the host before any device work.

A plan names, per micro-batch, its rows and the columns of verl's layout they need:

    input_ids (bs, S) = [prompt (bs, P), left-padded | response (bs, R), right-padded]

A micro-batch keeps columns [start, P + width): from its longest prompt's first token to its
longest response's last one, so responses stay the last `width` columns and logits for response
token t still sit at column P + t - 1 of the full layout (t - width - 1 from the end). Columns
dropped this way are padding in every row of the micro-batch; with padding (no use_remove_padding)
the model would otherwise run on all S columns of every micro-batch, whatever the token budget.

Rows are grouped either `micro_size` at a time or, with a token budget (`use_dynamic_bsz`), into
groups whose *cost* stays within `max_token_len`:
  - packed forwards (use_remove_padding): the real tokens (attention_mask sum), what the model sees;
  - padded forwards: rows x kept columns, the size of the tensor the model runs on.
FSDP2 all-gathers in every forward, so all ranks must run the same number of micro-batches: each
rank counts the groups it needs (first-fit decreasing), the ranks agree on the largest count, and
every rank cuts its rows into exactly that many groups, balanced, never over the budget.
Exactness does not depend on the grouping: losses are shares of mini-batch-wide counts
(algos/loss_agg.py), so any partition gives the same sum.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RowExtents:
    """Per-row extents of a batch in verl's layout (host tensors, (bs,) each)."""

    prompt_width: int  # P
    left: torch.Tensor  # columns from the row's first token to the end of the prompt part (>= 1)
    right: torch.Tensor  # response columns up to the row's last token (>= 1: one is always kept)
    tokens: torch.Tensor  # real tokens (attention_mask sum)

    @classmethod
    def of(cls, attention_mask: torch.Tensor, response_width: int) -> RowExtents:
        mask = attention_mask.cpu().bool()
        num_rows, seq = mask.shape
        prompt = seq - response_width
        if prompt < 1:
            raise ValueError(f"a batch of width {seq} has no prompt part before {response_width} responses")
        cols = torch.arange(seq)
        first = torch.where(mask, cols, seq).min(-1).values  # seq for an empty row
        last = torch.where(mask, cols, -1).max(-1).values  # -1 for an empty row
        left = (prompt - first).clamp(min=1, max=prompt)
        right = (last - prompt + 1).clamp(min=1)
        return cls(prompt, left, right, mask.sum(-1))


@dataclass(frozen=True)
class MicroPlan:
    """One micro-batch: `rows` of the batch, columns [start, prompt_width + width)."""

    rows: torch.Tensor  # (n,) long, ascending
    start: int  # first kept column of the (bs, S) tensors
    width: int  # kept response columns: the first `width` of the (bs, R) tensors

    @classmethod
    def of(cls, ext: RowExtents, rows: list[int]) -> MicroPlan:
        index = torch.tensor(sorted(rows), dtype=torch.long)
        return cls(index, ext.prompt_width - int(ext.left[index].max()), int(ext.right[index].max()))


class _Group:
    """A growing group of rows and its cost, updated in O(1) per row."""

    def __init__(self, ext: RowExtents, packed: bool):
        self.ext, self.packed = ext, packed
        self.rows: list[int] = []
        self.tokens = self.left = self.right = 0

    def cost_with(self, i: int) -> int:
        if self.packed:
            return self.tokens + int(self.ext.tokens[i])
        left, right = max(self.left, int(self.ext.left[i])), max(self.right, int(self.ext.right[i]))
        return (len(self.rows) + 1) * (left + right)

    @property
    def cost(self) -> int:
        if self.packed:
            return self.tokens
        return len(self.rows) * (self.left + self.right)

    def add(self, i: int) -> None:
        self.rows.append(i)
        self.tokens += int(self.ext.tokens[i])
        self.left, self.right = max(self.left, int(self.ext.left[i])), max(self.right, int(self.ext.right[i]))


def row_costs(ext: RowExtents, packed: bool) -> list[int]:
    """Each row's cost alone (its tokens; padded: the columns from its first to its last token)."""
    return (ext.tokens if packed else ext.left + ext.right).tolist()


def _by_cost(costs: list[int]) -> list[int]:
    return sorted(range(len(costs)), key=lambda i: (-costs[i], i))


def first_fit_groups(ext: RowExtents, max_token_len: int, packed: bool) -> list[list[int]]:
    """Rows into groups within the budget, first fit by decreasing cost (few groups, unbalanced)."""
    costs = row_costs(ext, packed)
    groups: list[_Group] = []
    for i in _by_cost(costs):
        if costs[i] > max_token_len:
            raise ValueError(
                f"a sequence of {costs[i]} tokens exceeds the token budget {max_token_len}; raise "
                "ppo_max_token_len_per_gpu / log_prob_max_token_len_per_gpu to at least prompt+response length"
            )
        group = next((g for g in groups if g.cost_with(i) <= max_token_len), None)
        if group is None:
            group = _Group(ext, packed)
            groups.append(group)
        group.add(i)
    return [g.rows for g in groups]


def balanced_groups(ext: RowExtents, num_groups: int, max_token_len: int, packed: bool) -> list[list[int]]:
    """Exactly `num_groups` non-empty groups, each within the budget, with balanced costs.

    Longest first into the lightest group that stays within the budget; if some row fits no
    group that way, the first-fit groups (at most `num_groups` of them when `num_groups` is at
    least the count `first_fit_groups` needs) are split until there are `num_groups`: a part of a
    group never costs more than the group. Needs num_groups <= rows."""
    num_rows = len(ext.tokens)
    if num_groups > num_rows:
        raise ValueError(f"cannot make {num_groups} micro-batches from {num_rows} rows")
    costs = row_costs(ext, packed)
    groups = [_Group(ext, packed) for _ in range(num_groups)]
    for i in _by_cost(costs):
        fits = [g for g in groups if g.cost_with(i) <= max_token_len]
        if not fits:
            return _split_to(first_fit_groups(ext, max_token_len, packed), num_groups, costs)
        min(fits, key=lambda g: g.cost).add(i)
    return [sorted(g.rows) for g in groups]


def _split_to(groups: list[list[int]], num_groups: int, costs: list[int]) -> list[list[int]]:
    if len(groups) > num_groups:
        raise ValueError(
            f"{len(groups)} micro-batches are needed to keep within the budget, not {num_groups}"
        )
    groups = [list(g) for g in groups]
    while len(groups) < num_groups:
        big = max(range(len(groups)), key=lambda j: (len(groups[j]), j))
        ordered = sorted(groups[big], key=lambda i: (-costs[i], i))
        groups[big] = ordered[0::2]
        groups.append(ordered[1::2])
    return [sorted(g) for g in groups]


def fixed_groups(num_rows: int, micro_size: int) -> list[list[int]]:
    return [list(range(i, min(i + micro_size, num_rows))) for i in range(0, num_rows, micro_size)]


def plan_micro_batches(
    attention_mask: torch.Tensor,
    response_width: int,
    *,
    micro_size: int | None,
    max_token_len: int | None,
    packed: bool,
    agree_max: Callable[[int], int] = lambda n: n,
) -> list[MicroPlan]:
    """The micro-batches of one batch on this rank. `agree_max(n)`: the largest n over the ranks
    (a collective every rank calls; only with a token budget)."""
    ext = RowExtents.of(attention_mask, response_width)
    if max_token_len is None:
        if micro_size is None or micro_size < 1:
            raise ValueError(f"micro_size={micro_size}: set a positive *_micro_batch_size_per_gpu")
        groups = fixed_groups(len(ext.tokens), micro_size)
    else:
        need = len(first_fit_groups(ext, max_token_len, packed))
        groups = balanced_groups(ext, agree_max(need), max_token_len, packed)
    return [MicroPlan.of(ext, g) for g in groups]
