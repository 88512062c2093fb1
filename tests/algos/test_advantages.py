"""Group-baseline advantage estimators by hand: grpo (and Dr.GRPO), grpo_vectorized, grpo_passk, gpg,
rloo, rloo_vectorized, opo, reinforce_plus_plus_baseline."""

import math

import numpy as np
import pytest
import torch

from verl_lite.algos import ADV_ESTIMATORS
from verl_lite.algos.advantages import compute_grpo_outcome_advantage, compute_rloo_outcome_advantage


def _rewards_at_end(scores, lengths, width=3):
    rewards = torch.zeros(len(scores), width)
    mask = torch.zeros(len(scores), width)
    for i, (s, n) in enumerate(zip(scores, lengths)):
        rewards[i, n - 1] = s
        mask[i, :n] = 1
    return rewards, mask


def _call(name, rewards, mask, index, **config):
    """The trainer's calling convention: rewards and mask, the spec's inputs, the spec's config keys."""
    spec = ADV_ESTIMATORS.spec(name)
    assert spec.inputs == ("index",), spec.inputs
    keys = {key.rsplit(".", 1)[-1] for key in spec.config_keys}
    assert set(config) <= keys, f"{name} does not read {set(config) - keys}"
    return spec.fn(token_level_rewards=rewards, response_mask=mask, index=index, **config)


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


def test_group_ids_must_match_the_batch():
    rewards, mask = _rewards_at_end([1, 0], [1, 1])
    with pytest.raises(ValueError, match="one group id per response"):
        _call("rloo", rewards, mask, np.array([0]))


def test_registry_names_the_key_on_unknown_estimator():
    assert ADV_ESTIMATORS.get("grpo") is compute_grpo_outcome_advantage
    for name in (
        "gae",
        "grpo",
        "rloo",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
        "remax",
        "gpg",
    ):
        assert name in ADV_ESTIMATORS.names()
    with pytest.raises(ValueError, match="algorithm.adv_estimator"):
        ADV_ESTIMATORS.get("nope")


def test_grpo_vectorized_gives_grpos_numbers_low_variance_groups_included():
    """verl 0.9 computes its std with group_mean_std(eps=0.0): no variance floor (its PR #6348)."""
    # group a: scores 0, 0.001 -> mean 0.0005, unbiased var 2 * 0.0005^2 = 5e-7:
    #   both +-0.0005 / (sqrt(5e-7) + 1e-6) (a floor at 1e-6 would give +-0.0005 / 0.001001)
    # group b: 1 0 1 0 -> var 1/3: both +-0.5 / (sqrt(1/3) + 1e-6)
    # group c: a single response 0.7 -> mean 0, std 1: both 0.7 / (1 + 1e-6)
    scores = [0.0, 0.001, 1, 0, 1, 0, 0.7]
    rewards, mask = _rewards_at_end(scores, [1, 2, 3, 3, 2, 1, 2])
    rewards = rewards.double()
    index = np.array(["a", "a", "b", "b", "b", "b", "c"], dtype=object)
    b = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    c = 0.7 / (1 + 1e-6)
    small = 0.0005 / (math.sqrt(5e-7) + 1e-6)
    grpo, _ = _call("grpo", rewards, mask, index)
    vec, returns = _call("grpo_vectorized", rewards, mask, index)
    expected = torch.tensor([-small, small, b, -b, b, -b, c], dtype=torch.float64)
    torch.testing.assert_close(grpo, expected.unsqueeze(-1) * mask)
    torch.testing.assert_close(vec, expected.unsqueeze(-1) * mask)
    assert torch.equal(vec, returns)
    dr, _ = _call("grpo_vectorized", rewards, mask, index, norm_adv_by_std_in_grpo=False)
    expected_dr = torch.tensor([-0.0005, 0.0005, 0.5, -0.5, 0.5, -0.5, 0.7], dtype=torch.float64)
    torch.testing.assert_close(dr, expected_dr.unsqueeze(-1) * mask)


def test_grpo_passk_only_the_best_response_learns():
    # group a: 0.2 0.9 0.5 -> best 0.9 (row 1), second 0.5: 0.4; unbiased var: sum s^2 = 1.1,
    #   sum (s - mean)^2 = 1.1 - 1.6^2 / 3 = 0.74 / 3, var = 0.37 / 3 -> 0.4 / (sqrt(0.37 / 3) + 1e-6)
    # group b: 1 1 (tied best) -> 1 - 1 = 0 for every row
    rewards, mask = _rewards_at_end([0.2, 1.0, 0.9, 1.0, 0.5], [2, 1, 3, 2, 1])
    index = np.array([0, 1, 0, 1, 0])
    adv, returns = _call("grpo_passk", rewards, mask, index)
    best = 0.4 / (math.sqrt(0.37 / 3) + 1e-6)
    torch.testing.assert_close(adv, torch.tensor([0.0, 0.0, best, 0.0, 0.0]).unsqueeze(-1) * mask)
    assert torch.equal(adv, returns)
    raw, _ = _call("grpo_passk", rewards, mask, index, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(raw, torch.tensor([0.0, 0.0, 0.4, 0.0, 0.0]).unsqueeze(-1) * mask)
    with pytest.raises(ValueError, match="grpo_passk needs at least 2 responses per prompt"):
        _call("grpo_passk", rewards[:3], mask[:3], np.array([0, 1, 0]))


def test_gpg_scales_the_centred_score_by_batch_over_nonzero():
    # 7 responses, 4 with a nonzero score -> alpha = 7 / 4 = 1.75; no std division
    # group a: 1 0 0 1 -> mean 0.5 -> +-0.5 * 1.75 = +-0.875
    # group b: 2 0 -> mean 1 -> +-1.75
    # group c: a single response 3 -> mean 0 -> 3 * 1.75 = 5.25
    rewards, mask = _rewards_at_end([1, 2, 0, 0, 3, 1, 0], [1, 2, 3, 1, 2, 3, 1])
    index = np.array(["a", "b", "a", "a", "c", "a", "b"], dtype=object)
    adv, returns = _call("gpg", rewards, mask, index)
    expected = torch.tensor([0.875, 1.75, -0.875, -0.875, 5.25, 0.875, -1.75])
    torch.testing.assert_close(adv, expected.unsqueeze(-1) * mask)
    assert torch.equal(adv, returns)
    zero, _ = _call("gpg", torch.zeros(2, 3), torch.ones(2, 3), np.array([0, 0]))  # alpha = 2 / max(0, 1)
    assert torch.equal(zero, torch.zeros(2, 3))


def test_rloo_vectorized_gives_a_group_of_one_zero():
    # same groups as test_rloo_leave_one_out_with_a_group_of_one: only the single response z differs
    scores = [3, 1, 0, 2, 6, 5]
    rewards, mask = _rewards_at_end(scores, [1, 2, 3, 3, 2, 1])
    index = np.array(["x", "y", "x", "y", "x", "z"], dtype=object)
    adv, returns = _call("rloo_vectorized", rewards, mask, index)
    expected = torch.tensor([0.0, -1.0, -4.5, 1.0, 4.5, 0.0])
    torch.testing.assert_close(adv, expected.unsqueeze(-1) * mask)
    assert torch.equal(adv, returns)


def test_opo_baseline_is_the_length_weighted_group_mean():
    # group x: scores 1 0 1, lengths 2 3 1 -> b = (2*1 + 3*0 + 1*1) / 6 = 0.5 -> 0.5, -0.5, 0.5
    # group y: a single response 2 -> b = 0 -> 2
    # group z: scores 3 1, lengths 1 3 -> b = (1*3 + 3*1) / 4 = 1.5 -> 1.5, -0.5
    rewards, mask = _rewards_at_end([1, 0, 2, 1, 3, 1], [2, 3, 2, 1, 1, 3])
    index = np.array(["x", "x", "y", "x", "z", "z"], dtype=object)
    adv, returns = _call("opo", rewards, mask, index)
    expected = torch.tensor([0.5, -0.5, 2.0, 0.5, 1.5, -0.5])
    torch.testing.assert_close(adv, expected.unsqueeze(-1) * mask)
    assert torch.equal(adv, returns) and (adv[mask == 0] == 0).all()


def test_group_ids_may_be_any_hashable_in_any_order():
    # the same groups spelled as ints, strings and tuples give the same advantages
    rewards, mask = _rewards_at_end([1, 0, 3, 2, 0.5], [1, 2, 3, 1, 2])
    spellings = [
        np.array([5, 9, 5, 9, 5]),
        np.array(["p", "q", "p", "q", "p"], dtype=object),
        np.array([(1, 2), (3,), (1, 2), (3,), (1, 2)] + [None], dtype=object)[:5],
    ]
    outs = [_call("grpo", rewards, mask, ids)[0] for ids in spellings]
    for out in outs[1:]:
        assert torch.equal(out, outs[0])
