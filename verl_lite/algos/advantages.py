"""Outcome advantage estimators whose baseline comes from the other responses to the same prompt.

Each is registered in ADV_ESTIMATORS with its spec (registry.py) and called by the trainer as

    fn(token_level_rewards=(bs, T), response_mask=(bs, T), index=(bs,) group ids, <its config keys>)
    -> (advantages, returns), both (bs, T) and zero on padding.

s_i is response i's summed reward (its score); a group is the responses sharing a group id. The
definitions follow verl's core_algos.py so a run means the same in both; each docstring states the
formula. Estimators built on returns over the tokens (gae, reinforce_plus_plus, remax) are in
returns.py.
"""

from __future__ import annotations

import numpy as np
import torch

from verl_lite.algos.groups import GroupStats
from verl_lite.algos.masked import masked_whiten
from verl_lite.algos.registry import ADV_ESTIMATORS

# verl runs these with rollout.n=1 (its CI does: run_function_reward.sh with ADV_ESTIMATOR=grpo): a
# group of one has no other response to compare with, and each estimator's docstring says what it gets
GROUP = dict(inputs=("index",))


def _group_of_one(what: str) -> dict:
    return dict(GROUP, group_of_one=what)


NORM_BY_STD = ("algorithm.norm_adv_by_std_in_grpo",)


def _per_token(per_response: torch.Tensor, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    advantages = per_response.unsqueeze(-1) * response_mask  # (bs, T)
    return advantages, advantages


@ADV_ESTIMATORS.register(
    "grpo", config_keys=NORM_BY_STD, **_group_of_one("mean 0 and std 1: its advantage is its own score")
)
@torch.no_grad()
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    index: np.ndarray,  # (bs,) group id: responses to the same prompt share it
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: A_i = (s_i - mean_g) / (std_g + eps), or s_i - mean_g without std (Dr.GRPO).

    std is the unbiased one (torch.std); a group of one has mean 0 and std 1, as in verl.
    """
    scores = token_level_rewards.sum(dim=-1)  # (bs,)
    g = GroupStats.of(scores, index)
    mean = torch.where(g.single, 0.0, g.mean)
    centred = scores - mean
    if norm_adv_by_std_in_grpo:
        centred = centred / (torch.where(g.single, 1.0, g.var.sqrt()) + epsilon)
    return _per_token(centred, response_mask)


@ADV_ESTIMATORS.register(
    "grpo_vectorized",
    config_keys=NORM_BY_STD,
    **_group_of_one("mean 0 and std 1: its advantage is its own score"),
)
@torch.no_grad()
def compute_grpo_vectorized_outcome_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    index: np.ndarray,  # (bs,)
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's vectorised GRPO, which gives grpo's numbers: (score - mean_g) / (std_g + epsilon), std
    unbiased with no floor (verl 0.9 computes it with group_mean_std(eps=0.0)). A group of one: mean 0,
    std 1; all-equal groups: 0.
    """
    scores = token_level_rewards.sum(dim=-1)  # (bs,)
    g = GroupStats.of(scores, index)
    mean = torch.where(g.single, 0.0, g.mean)
    std = torch.where(g.single, 1.0, g.var.clamp(min=0.0).sqrt())
    centred = scores - mean
    if norm_adv_by_std_in_grpo:
        centred = centred / (std + epsilon)
    return _per_token(centred, response_mask)


@ADV_ESTIMATORS.register(
    "grpo_passk",
    config_keys=NORM_BY_STD,
    **GROUP,
    min_group_size=2,
    why_group="it compares a group's best response with its second best; verl refuses fewer too",
)
@torch.no_grad()
def compute_grpo_passk_outcome_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    index: np.ndarray,  # (bs,)
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k (Chen et al. 2025, arXiv 2503.19595): only the group's best response learns.

    A_best = (s_max - s_second) [/ (std_g + eps)], every other response 0. Of tied best responses the
    first in batch order is the best. Every group needs two responses (as in verl).
    """
    scores = token_level_rewards.sum(dim=-1)  # (bs,)
    g = GroupStats.of(scores, index)
    if bool(g.single.any()):
        raise ValueError("algorithm.adv_estimator=grpo_passk needs at least 2 responses per prompt")
    per_response = torch.zeros_like(scores)
    for group in range(int(g.ids.max()) + 1):
        rows = (g.ids == group).nonzero().squeeze(-1)  # (n,)
        top2 = torch.sort(scores[rows], descending=True, stable=True)
        advantage = top2.values[0] - top2.values[1]
        if norm_adv_by_std_in_grpo:
            advantage = advantage / (g.var[rows[0]].sqrt() + epsilon)
        per_response[rows[top2.indices[0]]] = advantage
    return _per_token(per_response, response_mask)


@ADV_ESTIMATORS.register("gpg", **_group_of_one("mean 0: its advantage is alpha times its own score"))
@torch.no_grad()
def compute_gpg_outcome_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    index: np.ndarray,  # (bs,)
    f_norm: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPG (Chu et al. 2025, arXiv 2504.02546): A_i = alpha (s_i - mean_g) / f_norm, no std.

    alpha = bs / (number of responses with a nonzero score, at least 1) rescales the batch gradient for
    the responses that carry signal; f_norm = 1 as in verl. A group of one has mean 0. Pair it with
    policy_loss.loss_mode=gpg (plain policy gradient) for the paper's method.
    """
    scores = token_level_rewards.sum(dim=-1)  # (bs,)
    g = GroupStats.of(scores, index)
    alpha = scores.shape[0] / max(int(torch.count_nonzero(scores)), 1)
    mean = torch.where(g.single, 0.0, g.mean)
    return _per_token(alpha * (scores - mean) / f_norm, response_mask)


@ADV_ESTIMATORS.register("rloo", **_group_of_one("no baseline: its advantage is its own score"))
@torch.no_grad()
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    index: np.ndarray,  # (bs,)
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: A_i = s_i - mean of the other responses of its group = (s_i - mean_g) * n / (n - 1).

    A group of one has no other response to compare with: its advantage is its raw score (verl's
    choice; no baseline rather than a made-up one).
    """
    scores = token_level_rewards.sum(dim=-1)  # (bs,)
    g = GroupStats.of(scores, index)
    loo = torch.where(g.single, scores, (scores - g.mean) * g.size / (g.size - 1).clamp(min=1))
    return _per_token(loo, response_mask)


@ADV_ESTIMATORS.register(
    "rloo_vectorized", **_group_of_one("advantage 0 (verl's vectorised rule): nothing trains")
)
@torch.no_grad()
def compute_rloo_vectorized_outcome_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    index: np.ndarray,  # (bs,)
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's vectorised RLOO: the same leave-one-out advantage, but a group of one gets 0, not its score."""
    scores = token_level_rewards.sum(dim=-1)  # (bs,)
    g = GroupStats.of(scores, index)
    loo = torch.where(g.single, 0.0, (g.size * scores - g.sum_by_group(scores)) / (g.size - 1).clamp(min=1))
    return _per_token(loo, response_mask)


@ADV_ESTIMATORS.register("opo", **_group_of_one("baseline 0: its advantage is its own score"))
@torch.no_grad()
def compute_opo_outcome_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    index: np.ndarray,  # (bs,)
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO (Hao et al. 2025, arXiv 2505.23585): the length-weighted group mean as the baseline.

    b_g = sum_j |y_j| s_j / sum_j |y_j| over the group (|y| = valid response tokens), A_i = s_i - b_g;
    the variance-optimal baseline for an on-policy sequence-level gradient. A group of one: b = 0.
    """
    scores = token_level_rewards.sum(dim=-1)  # (bs,)
    lengths = response_mask.sum(dim=-1).to(scores.dtype)  # (bs,)
    g = GroupStats.of(scores, index)
    baseline = g.sum_by_group(lengths * scores) / g.sum_by_group(lengths).clamp(min=1)
    return _per_token(scores - torch.where(g.single, 0.0, baseline), response_mask)


@ADV_ESTIMATORS.register(
    "reinforce_plus_plus_baseline",
    **_group_of_one("baseline 0: whitened scores over the batch (plain REINFORCE++)"),
)
@torch.no_grad()
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    index: np.ndarray,  # (bs,)
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline: s_i - mean_g on every valid token, then whitened over the batch's tokens.

    The whitening (mean and unbiased std over all valid tokens of the batch) replaces GRPO's per-group
    std; a group of one has baseline 0, so n = 1 is plain batch-whitened REINFORCE.
    """
    scores = token_level_rewards.sum(dim=-1)  # (bs,)
    g = GroupStats.of(scores, index)
    centred = (scores - torch.where(g.single, 0.0, g.mean)).unsqueeze(-1) * response_mask  # (bs, T)
    advantages = masked_whiten(centred, response_mask) * response_mask
    return advantages, advantages
