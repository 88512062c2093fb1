"""Optimal Token Baseline (OTB): a per-token baseline weighted by how much uncertainty the path has built up.

For each group (the responses to one prompt) and each token position t:

    G_t = sum_{k>=t} r_k                              returns-to-go (undiscounted)
    w_j = 1 - 2 pi_j + sum_v pi_v^2                   the squared norm of d logp_j / d logits (the
                                                      "logit-gradient proxy"), pi_j the sampled token's
                                                      probability under the rollout-time actor
    W_t = sum_{j<=t} m_j w_j                          accumulated along the response
    B_t = sum_i G_t^i W_t^i m_t^i / (sum_i W_t^i m_t^i + eps),   A_t = (G_t - B_t) m_t

so paths that have accumulated more gradient energy weigh more in the baseline (the variance-minimising
choice for this proxy). A group of one has no baseline (A = G). sum_v pi_v^2 comes from the actor's
compute_log_prob when actor_rollout_ref.actor.calculate_sum_pi_squared=True (the spec requires it).

`optimal_token_baseline` aligns the responses of a group by token position. `tir_optimal_token_baseline`
(multi-turn, tool-interleaved) first packs each response's valid tokens to the left, so the k-th
generated token of every response is compared with the k-th of the others whatever observations sit
between them, and by default zeroes the baseline on the stretch where only the longest response still
runs (there B_t would equal its own G_t and its advantage would vanish). Formulas as verl's; verl's
optional rollout importance weights (rollout_is_weights) do not exist in verl_lite.
"""

from __future__ import annotations

import numpy as np
import torch

from verl_lite.algos.groups import group_ids
from verl_lite.algos.registry import ADV_ESTIMATORS

OTB = dict(
    inputs=("index", "old_log_probs", "sum_pi_squared"),
    requires=(("actor_rollout_ref.actor.calculate_sum_pi_squared", True),),
    group_of_one="no baseline: its advantage is its return (verl's rule)",
)


def _pack_left(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(bs, T) -> (bs, T) with each row's valid entries moved to the front, in order; zeros after."""
    order = torch.sort((~mask).to(torch.int8), dim=-1, stable=True).indices  # valid positions first
    return torch.gather(values * mask, -1, order)


def _unpack_left(packed: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    order = torch.sort((~mask).to(torch.int8), dim=-1, stable=True).indices
    return torch.zeros_like(packed).scatter(-1, order, packed) * mask


def _group_baselines(
    returns: torch.Tensor,
    weights: torch.Tensor,
    lengths: torch.Tensor,
    index,
    handle_zero_tail: bool,
    eps: float,
) -> torch.Tensor:
    """(bs, T) B_t per group over aligned positions; `returns` and `weights` are zero where invalid."""
    baselines = torch.zeros_like(returns)
    ids = group_ids(index, returns.shape[0])
    for group in range(int(ids.max()) + 1 if len(ids) else 0):
        rows = ((ids == group) & (lengths > 0)).nonzero().squeeze(-1)  # empty responses take no part
        if len(rows) < 2:
            continue
        baselines[rows] = (returns[rows] * weights[rows]).sum(0) / (weights[rows].sum(0) + eps)
        if handle_zero_tail:
            sorted_lengths = lengths[rows].sort().values
            longest, second = int(sorted_lengths[-1]), int(sorted_lengths[-2])
            if longest > second:  # a single longest response: no one to compare its tail with
                baselines[rows[lengths[rows] == longest], second:] = 0.0
    return baselines


def _otb(
    token_level_rewards, response_mask, index, old_log_probs, sum_pi_squared, pack, handle_zero_tail, eps
):
    valid = response_mask.bool()
    mask = response_mask.to(token_level_rewards.dtype)
    returns = (token_level_rewards * mask).flip(-1).cumsum(-1).flip(-1) * mask  # (bs, T)
    energy = ((1.0 - 2.0 * old_log_probs.exp() + sum_pi_squared) * mask).cumsum(-1) * mask  # (bs, T) W_t
    lengths = valid.sum(-1)  # (bs,)
    if pack:
        returns_p, energy_p = _pack_left(returns, valid), _pack_left(energy, valid)
        baselines = _group_baselines(returns_p, energy_p, lengths, index, handle_zero_tail, eps)
        return _unpack_left(returns_p - baselines, valid), returns
    baselines = _group_baselines(returns, energy, lengths, index, handle_zero_tail, eps)
    return (returns - baselines) * mask, returns


@ADV_ESTIMATORS.register("optimal_token_baseline", **OTB)
@torch.no_grad()
def compute_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    index: np.ndarray,  # (bs,)
    old_log_probs: torch.Tensor,  # (bs, T) log-probs of the sampled tokens at rollout time
    sum_pi_squared: torch.Tensor,  # (bs, T) sum over the vocabulary of pi^2 at each token
    handle_zero_tail: bool = False,
    epsilon: float = 1e-8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OTB with responses aligned by position (verl's default handle_zero_tail=False). See the module."""
    args = (token_level_rewards, response_mask, index, old_log_probs, sum_pi_squared)
    return _otb(*args, pack=False, handle_zero_tail=handle_zero_tail, eps=epsilon)


@ADV_ESTIMATORS.register("tir_optimal_token_baseline", **OTB)
@torch.no_grad()
def compute_multi_turn_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    index: np.ndarray,  # (bs,)
    old_log_probs: torch.Tensor,  # (bs, T)
    sum_pi_squared: torch.Tensor,  # (bs, T)
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OTB over each response's valid tokens packed to the left (verl's default handle_zero_tail=True)."""
    args = (token_level_rewards, response_mask, index, old_log_probs, sum_pi_squared)
    return _otb(*args, pack=True, handle_zero_tail=handle_zero_tail, eps=epsilon)
