"""Outcome advantage estimators: one score per response, a baseline from its group or a greedy rollout.

Every estimator is registered in ADV_ESTIMATORS and called by the trainer with the same keywords:

    fn(token_level_rewards=(bs, T), response_mask=(bs, T), index=(bs,) group ids, values=(bs, T) | None,
       gamma=float, lam=float, norm_adv_by_std_in_grpo=bool, reward_baselines=(bs,) | None)
    -> (advantages, returns), both (bs, T) and zero on padding.

An estimator ignores the keywords it does not use. The estimators built on discounted returns over the
response tokens (gae, reinforce_plus_plus) live in returns.py. The definitions follow verl's
core_algos.py so a run means the same thing in both; each docstring states the formula.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from verl_lite.algos.masked import masked_whiten
from verl_lite.algos.registry import ADV_ESTIMATORS


def group_rows(index, batch_size: int) -> list[list[int]]:
    """Rows grouped by their group id (responses to the same prompt share one), in first-seen order."""
    if index is None or len(index) != batch_size:
        raise ValueError(
            f"advantage estimator needs one group id per response: got index of length "
            f"{None if index is None else len(index)} for {batch_size} responses"
        )
    groups: dict[object, list[int]] = defaultdict(list)
    for row, key in enumerate(np.asarray(index, dtype=object)):
        groups[key].append(row)
    return list(groups.values())


def _group_mean_std(scores: torch.Tensor, index) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row mean, unbiased std and size of the row's group; a group of one gets mean 0, std 1."""
    mean, std = torch.zeros_like(scores), torch.ones_like(scores)
    size = torch.ones_like(scores)
    for rows in group_rows(index, scores.shape[0]):
        size[rows] = float(len(rows))
        if len(rows) > 1:
            group = scores[rows]
            mean[rows], std[rows] = group.mean(), group.std()
    return mean, std, size


@ADV_ESTIMATORS.register("grpo")
@torch.no_grad()
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    index: np.ndarray,  # (bs,) group id: responses to the same prompt share it
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
    **_unused,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: A_i = (s_i - mean_g) / (std_g + eps), or s_i - mean_g without std (Dr.GRPO).

    s_i is the response's summed reward; std is the unbiased one (torch.std); a group of one has
    mean 0 and std 1, as in verl.
    """
    scores = token_level_rewards.sum(dim=-1)  # (bs,)
    mean, std, _ = _group_mean_std(scores, index)
    centred = scores - mean
    if norm_adv_by_std_in_grpo:
        centred = centred / (std + epsilon)
    advantages = centred.unsqueeze(-1) * response_mask
    return advantages, advantages


@ADV_ESTIMATORS.register("rloo")
@torch.no_grad()
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    index: np.ndarray,  # (bs,)
    **_unused,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: A_i = s_i - mean of the other responses of its group = (s_i - mean_g) * n / (n - 1).

    A group of one has no other response to compare with: its advantage is its raw score (verl's
    choice; no baseline rather than a made-up one).
    """
    scores = token_level_rewards.sum(dim=-1)  # (bs,)
    mean, _, size = _group_mean_std(scores, index)
    loo = torch.where(size > 1, (scores - mean) * size / (size - 1).clamp(min=1), scores)
    advantages = loo.unsqueeze(-1) * response_mask
    return advantages, advantages


@ADV_ESTIMATORS.register("reinforce_plus_plus_baseline")
@torch.no_grad()
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    index: np.ndarray,  # (bs,)
    **_unused,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline: s_i - mean_g on every valid token, then whitened over the batch's tokens.

    The whitening (mean and unbiased std over all valid tokens of the batch) replaces GRPO's per-group
    std; a group of one has baseline 0.
    """
    scores = token_level_rewards.sum(dim=-1)  # (bs,)
    mean, _, _ = _group_mean_std(scores, index)
    centred = (scores - mean).unsqueeze(-1) * response_mask  # (bs, T)
    advantages = masked_whiten(centred, response_mask) * response_mask
    return advantages, advantages


@ADV_ESTIMATORS.register("remax")
@torch.no_grad()
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    reward_baselines: torch.Tensor | None = None,  # (bs,) score of the greedy response to the same prompt
    **_unused,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax: returns-to-go G_t = sum_{k>=t} r_k (undiscounted), A_t = G_t - b with b the greedy score.

    With an outcome reward on the last token, G_t is the response's score on every valid token.
    """
    if reward_baselines is None:
        raise ValueError(
            "algorithm.adv_estimator=remax needs reward_baselines: the scores of a greedy rollout per prompt"
        )
    mask = response_mask.to(token_level_rewards.dtype)
    returns = (token_level_rewards * mask).flip(-1).cumsum(-1).flip(-1) * mask  # (bs, T)
    advantages = returns - reward_baselines.to(returns.dtype).unsqueeze(-1) * mask
    return advantages, returns
