"""GAE, REINFORCE++ and ReMax against hand calculations and a plain per-response reference loop."""

import math

import numpy as np
import pytest
import torch

from verl_lite.algos import ADV_ESTIMATORS
from verl_lite.algos.returns import compute_gae_advantage_return, compute_remax_outcome_advantage


def test_gae_by_hand():
    # one response of 2 tokens + 1 padding token (its value 9 is garbage and must be ignored)
    # gamma 0.9, lam 0.5, rewards [0, 1], values [0.5, 0.2]:
    #   t=1: delta = 1 + 0.9*0 - 0.2 = 0.8                   A1 = 0.8
    #   t=0: delta = 0 + 0.9*0.2 - 0.5 = -0.32               A0 = -0.32 + 0.9*0.5*0.8 = 0.04
    #   returns = A + V = [0.54, 1.0]
    #   whitened over the 2 tokens: mean 0.42, unbiased var 2*0.38^2 = 0.2888 -> -+0.38/sqrt(0.2888)
    rewards = torch.tensor([[0.0, 1.0, 0.0]])
    values = torch.tensor([[0.5, 0.2, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    adv, returns = ADV_ESTIMATORS.get("gae")(
        token_level_rewards=rewards, response_mask=mask, values=values, gamma=0.9, lam=0.5
    )
    torch.testing.assert_close(returns, torch.tensor([[0.54, 1.0, 0.0]]))
    w = 0.38 / math.sqrt(0.2888 + 1e-8)
    torch.testing.assert_close(adv, torch.tensor([[-w, w, 0.0]]))


def _reference_gae(rewards, values, mask, gamma, lam):
    """Plain loop per response over its valid positions only (holes skipped, V after the last = 0)."""
    raw = np.zeros_like(rewards)
    for i in range(rewards.shape[0]):
        positions = [t for t in range(rewards.shape[1]) if mask[i, t]]
        next_value, next_adv = 0.0, 0.0
        for t in reversed(positions):
            delta = rewards[i, t] + gamma * next_value - values[i, t]
            next_adv = delta + gamma * lam * next_adv
            next_value = values[i, t]
            raw[i, t] = next_adv
    valid = raw[mask.astype(bool)]
    whitened = (raw - valid.mean()) / math.sqrt(valid.var(ddof=1) + 1e-8) * mask
    return whitened, (raw + values) * mask


def test_gae_matches_reference_loop_with_holes_and_padding():
    g = torch.Generator().manual_seed(3)
    rewards = torch.randn(5, 7, generator=g, dtype=torch.float64)
    values = torch.randn(5, 7, generator=g, dtype=torch.float64)
    mask = torch.tensor(
        [
            [1, 1, 1, 1, 1, 1, 1],  # full length
            [1, 1, 1, 0, 0, 0, 0],  # right padding
            [1, 1, 0, 0, 1, 1, 0],  # a hole (e.g. a tool observation) inside the response
            [1, 0, 0, 0, 0, 0, 0],  # a single token
            [0, 0, 0, 0, 0, 0, 0],  # empty response
        ],
        dtype=torch.float64,
    )
    adv, returns = compute_gae_advantage_return(rewards, mask, values=values, gamma=0.95, lam=0.9)
    ref_adv, ref_returns = _reference_gae(rewards.numpy(), values.numpy(), mask.numpy(), 0.95, 0.9)
    np.testing.assert_allclose(returns.numpy(), ref_returns, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(adv.numpy(), ref_adv, rtol=1e-10, atol=1e-10)
    assert (adv[mask == 0] == 0).all() and (returns[mask == 0] == 0).all()


def test_gae_with_gamma_lam_one_is_monte_carlo_return_minus_value():
    # gamma = lam = 1: raw A_t = sum_{k>=t} r_k - V_t, so returns = rewards-to-go
    rewards = torch.tensor([[0.0, 0.0, 2.0], [0.0, 1.0, 0.0]])
    values = torch.tensor([[0.3, -0.1, 0.7], [1.0, 1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    _, returns = compute_gae_advantage_return(rewards, mask, values=values, gamma=1.0, lam=1.0)
    torch.testing.assert_close(returns, torch.tensor([[2.0, 2.0, 2.0], [1.0, 1.0, 0.0]]))


def test_gae_needs_values():
    with pytest.raises(ValueError, match="gae needs critic values"):
        compute_gae_advantage_return(torch.zeros(1, 2), torch.ones(1, 2))


def test_reinforce_plus_plus_discounted_returns_whitened():
    # gamma 0.5
    # row 0: rewards [1, 0, 2], all valid -> G = [1 + 0.5*(0 + 0.5*2), 0 + 0.5*2, 2] = [1.5, 1, 2]
    # row 1: rewards [0, 3, 7], last token padding -> the 7 is cut off: G = [1.5, 3, 0]
    # valid G: 1.5 1 2 1.5 3 -> mean 1.8, squares of deviations .09 .64 .04 .09 1.44 = 2.3, var 2.3/4
    rewards = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, returns = ADV_ESTIMATORS.get("reinforce_plus_plus")(
        token_level_rewards=rewards, response_mask=mask, gamma=0.5
    )
    torch.testing.assert_close(returns, torch.tensor([[1.5, 1.0, 2.0], [1.5, 3.0, 0.0]]))
    s = math.sqrt(2.3 / 4 + 1e-8)
    expected = torch.tensor([[-0.3 / s, -0.8 / s, 0.2 / s], [-0.3 / s, 1.2 / s, 0.0]])
    torch.testing.assert_close(adv, expected)


def test_reinforce_plus_plus_carries_the_return_through_a_tool_reply():
    """A multi-turn response: policy tokens, a tool's reply (masked), policy tokens, reward at the end.
    verl 0.9 skips the masked span, so the outcome reaches the first turn: G = [1, 1, 0, 0, 1, 1]."""
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]])
    adv, returns = ADV_ESTIMATORS.get("reinforce_plus_plus")(
        token_level_rewards=rewards, response_mask=mask, gamma=1.0
    )
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1, 0, 0, 1, 1], [0.0, 0, 0, 0, 0, 0]]))
    assert adv[0, :2].min() > 0 and adv[1, :2].max() < 0 and (adv[:, 2:4] == 0).all()


def test_remax_subtracts_the_greedy_score():
    # rewards at the last valid token; returns-to-go = the score on every valid token
    # row 0: score 1, greedy 0.25 -> 0.75 on 2 tokens; row 1: score 0, greedy 1 -> -1 on 3 tokens
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv, returns = ADV_ESTIMATORS.get("remax")(
        token_level_rewards=rewards, response_mask=mask, reward_baselines=torch.tensor([0.25, 1.0])
    )
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    torch.testing.assert_close(adv, torch.tensor([[0.75, 0.75, 0.0], [-1.0, -1.0, -1.0]]))
    with pytest.raises(ValueError, match="remax needs reward_baselines"):
        compute_remax_outcome_advantage(rewards, mask)


def test_remax_returns_to_go_of_dense_rewards():
    # dense rewards [1, 2, 4] with mask [1, 1, 0]: the padded 4 is ignored -> returns [3, 2, 0]
    rewards, mask = torch.tensor([[1.0, 2.0, 4.0]]), torch.tensor([[1.0, 1.0, 0.0]])
    adv, returns = compute_remax_outcome_advantage(rewards, mask, reward_baselines=torch.tensor([0.5]))
    torch.testing.assert_close(returns, torch.tensor([[3.0, 2.0, 0.0]]))
    torch.testing.assert_close(adv, torch.tensor([[2.5, 1.5, 0.0]]))
