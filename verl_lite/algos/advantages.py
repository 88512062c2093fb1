"""Advantage estimators (outcome rewards, computed on the driver).

Every estimator takes token-level rewards (batch, response_len) and the response mask, and returns
(advantages, returns) of the same shape, zero on padding.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from verl_lite.algos.registry import ADV_ESTIMATORS


@ADV_ESTIMATORS.register("grpo")
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    index: np.ndarray,  # (bs,) group id: responses to the same prompt share it
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
    **_unused,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: a response's score minus its group's mean, divided by the group's std when asked.

    The std is the unbiased one (torch.std); a group of one has mean 0 and std 1, as in verl.
    """
    scores = token_level_rewards.sum(dim=-1)  # (bs,)
    groups: dict[object, list[int]] = defaultdict(list)
    for i, key in enumerate(index):
        groups[key].append(i)
    mean = torch.zeros_like(scores)
    std = torch.ones_like(scores)
    for rows in groups.values():
        if len(rows) > 1:
            group = scores[rows]
            mean[rows] = group.mean()
            std[rows] = group.std()
    centred = scores - mean
    if norm_adv_by_std_in_grpo:
        centred = centred / (std + epsilon)
    advantages = centred.unsqueeze(-1) * response_mask
    return advantages, advantages
