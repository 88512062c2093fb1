"""GRPO advantages against numbers worked out by hand."""

import numpy as np
import pytest
import torch

from verl_lite.algos import ADV_ESTIMATORS
from verl_lite.algos.advantages import compute_grpo_outcome_advantage


def _rewards_at_end(scores, lengths, width=3):
    rewards = torch.zeros(len(scores), width)
    mask = torch.zeros(len(scores), width)
    for i, (s, n) in enumerate(zip(scores, lengths)):
        rewards[i, n - 1] = s
        mask[i, :n] = 1
    return rewards, mask


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


def test_grpo_without_std_is_mean_centred():
    rewards, mask = _rewards_at_end([1, 0, 1, 0], [2, 2, 1, 3])
    index = np.array([0, 0, 0, 0], dtype=object)
    adv, _ = compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(adv, torch.tensor([0.5, -0.5, 0.5, -0.5]).unsqueeze(-1) * mask)


def test_registry_names_the_key_on_unknown_estimator():
    assert ADV_ESTIMATORS.get("grpo") is compute_grpo_outcome_advantage
    with pytest.raises(ValueError, match="algorithm.adv_estimator"):
        ADV_ESTIMATORS.get("nope")
