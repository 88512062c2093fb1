"""Group statistics of per-response scores: the responses to one prompt share a group id (`uid`).

The outcome estimators compare a response with the others of its group; these helpers turn the
group ids into a dense index and compute per-group counts, means and unbiased variances with
index_add, returned per row so an estimator reads them beside the row's own score.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def group_ids(index, batch_size: int) -> torch.Tensor:
    """(bs,) dense group numbers 0..G-1 from any hashable ids; one id per response is required."""
    if index is None or len(index) != batch_size:
        raise ValueError(
            f"advantage estimator needs one group id per response: got index of length "
            f"{None if index is None else len(index)} for {batch_size} responses"
        )
    numbers: dict[object, int] = {}
    return torch.tensor([numbers.setdefault(key, len(numbers)) for key in np.asarray(index, dtype=object)])


@dataclass(frozen=True)
class GroupStats:
    """Per-row statistics of the row's group, each (bs,)."""

    ids: torch.Tensor  # dense group number of each row
    size: torch.Tensor  # responses in the group
    mean: torch.Tensor  # mean score of the group
    var: torch.Tensor  # unbiased variance of the group's scores (0 for a group of one)

    @classmethod
    def of(cls, scores: torch.Tensor, index) -> GroupStats:
        ids = group_ids(index, scores.shape[0])
        num_groups = int(ids.max()) + 1 if len(ids) else 0
        size = torch.zeros(num_groups, dtype=scores.dtype).index_add_(0, ids, torch.ones_like(scores))
        mean = torch.zeros(num_groups, dtype=scores.dtype).index_add_(0, ids, scores) / size
        dev2 = (scores - mean[ids]).square()  # two passes: no cancellation in sum(s^2) - sum(s)^2 / n
        var = torch.zeros(num_groups, dtype=scores.dtype).index_add_(0, ids, dev2) / (size - 1).clamp(min=1)
        return cls(ids, size[ids], mean[ids], var[ids])

    def sum_by_group(self, values: torch.Tensor) -> torch.Tensor:
        """Per-row sum of `values` over the row's group."""
        sums = torch.zeros(int(self.ids.max()) + 1, dtype=values.dtype).index_add_(0, self.ids, values)
        return sums[self.ids]

    @property
    def single(self) -> torch.Tensor:
        """True for rows alone in their group."""
        return self.size <= 1
