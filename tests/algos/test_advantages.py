"""Outcome advantage estimators (grpo, Dr.GRPO, rloo, reinforce_plus_plus_baseline, remax) by hand."""

import math

import numpy as np
import pytest
import torch

from verl_lite.algos import ADV_ESTIMATORS
from verl_lite.algos.advantages import (
    compute_grpo_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
)


def _rewards_at_end(scores, lengths, width=3):
    rewards = torch.zeros(len(scores), width)
    mask = torch.zeros(len(scores), width)
    for i, (s, n) in enumerate(zip(scores, lengths)):
        rewards[i, n - 1] = s
        mask[i, :n] = 1
    return rewards, mask


def _call(name, rewards, mask, index, **kw):
    """The trainer's calling convention: every estimator gets every keyword."""
    defaults = dict(values=None, gamma=1.0, lam=1.0, norm_adv_by_std_in_grpo=True, reward_baselines=None)
    return ADV_ESTIMATORS.get(name)(
        token_level_rewards=rewards, response_mask=mask, index=index, **{**defaults, **kw}
    )


def test_grpo_groups_normalised_by_unbiased_std():
    # group a: scores 1 0 1 0 -> mean 0.5, unbiased std sqrt(1/3) = 0.57735 -> +-0.866025
    # group b: one response, score 0.7 -> mean 0, std 1 -> 0.7 / (1 + 1e-6)
    # group c: 2 2 -> std 0 -> 0 / eps = 0
    scores = [1, 0, 1, 0, 0.7, 2, 2]
    lengths = [3, 1, 2, 3, 2, 1, 3]
    rewards, mask = _rewards_at_end(scores, lengths)
    index = np.array(["a", "a", "a", "a", "b", "c", "c"], dtype=object)
    adv, returns = compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=True)
    expected_seq = torch.tensor([0.866025, -0.866025, 0.866025, -0.866025, 0.7 / (1 + 1e-6), 0.0, 0.0])
    torch.testing.assert_close(adv, expected_seq.unsqueeze(-1) * mask, atol=1e-5, rtol=0)
    assert torch.equal(adv, returns)
    assert (adv[mask == 0] == 0).all(), "padding must carry no advantage"


def test_dr_grpo_is_mean_centred_through_the_trainer_keywords():
    # Dr.GRPO = grpo with norm_adv_by_std_in_grpo=False: scores 1 0 1 0, mean 0.5 -> +-0.5
    rewards, mask = _rewards_at_end([1, 0, 1, 0], [2, 2, 1, 3])
    adv, _ = _call("grpo", rewards, mask, np.array([0, 0, 0, 0]), norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(adv, torch.tensor([0.5, -0.5, 0.5, -0.5]).unsqueeze(-1) * mask)


def test_rloo_leave_one_out_with_a_group_of_one():
    # group x (interleaved with y): scores 3, 0, 6 -> baselines mean(0,6)=3, mean(3,6)=4.5, mean(3,0)=1.5
    #   A = 3-3 = 0, 0-4.5 = -4.5, 6-1.5 = 4.5
    # group y: 1, 2 -> 1-2 = -1, 2-1 = +1
    # group z: a single response, no other to compare with -> its raw score 5
    scores = [3, 1, 0, 2, 6, 5]
    lengths = [1, 2, 3, 3, 2, 1]
    rewards, mask = _rewards_at_end(scores, lengths)
    index = np.array(["x", "y", "x", "y", "x", "z"], dtype=object)
    adv, returns = _call("rloo", rewards, mask, index)
    expected = torch.tensor([0.0, -1.0, -4.5, 1.0, 4.5, 5.0])
    torch.testing.assert_close(adv, expected.unsqueeze(-1) * mask)
    assert torch.equal(adv, returns) and (adv[mask == 0] == 0).all()


def test_rloo_equals_grpo_centring_times_n_over_n_minus_1():
    g = torch.Generator().manual_seed(0)
    rewards, mask = _rewards_at_end(torch.rand(8, generator=g).tolist(), [1, 2, 3, 3, 2, 1, 1, 2])
    index = np.repeat(np.arange(2), 4)
    rloo, _ = compute_rloo_outcome_advantage(rewards, mask, index)
    centred, _ = compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(rloo, centred * 4 / 3)


def test_reinforce_plus_plus_baseline_group_mean_then_batch_whitening():
    # group a: scores 1, 0 -> mean 0.5 -> +0.5 on 2 tokens, -0.5 on 1 token
    # group b: single response, score 2 -> baseline 0 -> 2 on 2 tokens
    # valid tokens: [0.5, 0.5, -0.5, 2, 2] -> mean 0.9, unbiased var = (0.16+0.16+1.96+1.21+1.21)/4 = 1.175
    rewards, mask = _rewards_at_end([1, 0, 2], [2, 1, 2])
    adv, returns = _call("reinforce_plus_plus_baseline", rewards, mask, np.array([7, 7, 9]))
    s = math.sqrt(1.175 + 1e-8)
    expected = torch.tensor(
        [[(0.5 - 0.9) / s, (0.5 - 0.9) / s, 0], [(-0.5 - 0.9) / s, 0, 0], [1.1 / s, 1.1 / s, 0]]
    )
    torch.testing.assert_close(adv, expected)
    assert torch.equal(adv, returns)


def test_remax_subtracts_the_greedy_score():
    # rewards at the last valid token; returns-to-go = the score on every valid token
    # row 0: score 1, greedy 0.25 -> 0.75 on 2 tokens; row 1: score 0, greedy 1 -> -1 on 3 tokens
    rewards, mask = _rewards_at_end([1.0, 0.0], [2, 3])
    adv, returns = _call("remax", rewards, mask, np.array([0, 1]), reward_baselines=torch.tensor([0.25, 1.0]))
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


def test_group_ids_must_match_the_batch():
    rewards, mask = _rewards_at_end([1, 0], [1, 1])
    with pytest.raises(ValueError, match="one group id per response"):
        _call("rloo", rewards, mask, np.array([0]))


def test_registry_names_the_key_on_unknown_estimator():
    assert ADV_ESTIMATORS.get("grpo") is compute_grpo_outcome_advantage
    for name in ("gae", "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax"):
        assert name in ADV_ESTIMATORS.names()
    with pytest.raises(ValueError, match="algorithm.adv_estimator"):
        ADV_ESTIMATORS.get("nope")
