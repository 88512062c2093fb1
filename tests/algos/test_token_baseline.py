"""Optimal token baseline (optimal_token_baseline, tir_optimal_token_baseline) by hand."""

import numpy as np
import torch

from verl_lite.algos import ADV_ESTIMATORS

EPS = 1e-8


def _call(name, rewards, mask, index, pi, sum_pi_sq, **kw):
    return ADV_ESTIMATORS.get(name)(
        token_level_rewards=rewards,
        response_mask=mask,
        index=index,
        old_log_probs=pi.log(),
        sum_pi_squared=sum_pi_sq,
        **kw,
    )


def _two_paths():
    # group g: a = 3 tokens, reward 1 at the end -> G_a = [1, 1, 1]; b = 2 tokens, reward 0 -> G_b = 0
    # pi_a = [0.9, 0.5, 0.5], sum pi^2 = [0.82, 0.5, 0.5] -> w_a = 1 - 2 pi + sum pi^2 = [0.02, 0.5, 0.5]
    #   W_a = [0.02, 0.52, 1.02];  pi_b = [0.5, 0.5], sum pi^2 0.5 -> w_b = [0.5, 0.5], W_b = [0.5, 1.0]
    # single response c: 2 tokens, reward 2 -> no baseline, A = G = [2, 2]
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 2.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    pi = torch.tensor([[0.9, 0.5, 0.5], [0.5, 0.5, 0.3], [0.4, 0.6, 0.3]], dtype=torch.float64)
    sum_pi_sq = torch.tensor([[0.82, 0.5, 0.5], [0.5, 0.5, 0.9], [0.5, 0.5, 0.9]], dtype=torch.float64)
    return rewards, mask, np.array(["g", "g", "c"], dtype=object), pi, sum_pi_sq


def test_otb_baseline_weights_paths_by_accumulated_energy():
    # B_0 = (1 * 0.02 + 0 * 0.5) / (0.52 + eps), B_1 = (1 * 0.52) / (1.52 + eps), B_2 = 1.02 / (1.02 + eps)
    # A_a = 1 - B, A_b = -B on its 2 tokens; a plain group mean would give +-0.5 everywhere
    rewards, mask, index, pi, sum_pi_sq = _two_paths()
    adv, returns = _call("optimal_token_baseline", rewards, mask, index, pi, sum_pi_sq)
    b = [0.02 / (0.52 + EPS), 0.52 / (1.52 + EPS), 1.02 / (1.02 + EPS)]
    expected = torch.tensor(
        [[1 - b[0], 1 - b[1], 1 - b[2]], [-b[0], -b[1], 0.0], [2.0, 2.0, 0.0]], dtype=torch.float64
    )
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(
        returns, torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [2.0, 2.0, 0.0]]).double()
    )


def test_otb_zero_tail_gives_the_longest_path_its_return():
    # a's third token has no partner in its group: with handle_zero_tail its baseline is 0 -> A = G = 1
    rewards, mask, index, pi, sum_pi_sq = _two_paths()
    adv, _ = _call("optimal_token_baseline", rewards, mask, index, pi, sum_pi_sq, handle_zero_tail=True)
    assert adv[0, 2].item() == 1.0
    torch.testing.assert_close(
        adv[0, :2], torch.tensor([1 - 0.02 / (0.52 + EPS), 1 - 0.52 / (1.52 + EPS)]).double()
    )


def test_tir_otb_aligns_the_kth_generated_tokens_across_holes():
    # a's tokens sit at positions 0, 2, 3 (position 1 is a tool observation, garbage pi there), b's at 0, 1.
    # TIR packs them: a's k-th token meets b's k-th token, so the numbers are those of _two_paths:
    #   A_a at positions 0, 2, 3 = 1 - B_0, 1 - B_1, and 1 (zero tail by default); A_b = -B_0, -B_1
    # OTB by position instead pairs a's position 1 (a hole: no weight) with b's second token: B_1 = 0 there
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    pi = torch.tensor([[0.9, 0.1, 0.5, 0.5], [0.5, 0.5, 0.2, 0.2]], dtype=torch.float64)
    sum_pi_sq = torch.tensor([[0.82, 0.3, 0.5, 0.5], [0.5, 0.5, 0.7, 0.7]], dtype=torch.float64)
    index = np.array([0, 0])
    adv, returns = _call("tir_optimal_token_baseline", rewards, mask, index, pi, sum_pi_sq)
    b0, b1 = 0.02 / (0.52 + EPS), 0.52 / (1.52 + EPS)
    expected = torch.tensor([[1 - b0, 0.0, 1 - b1, 1.0], [-b0, -b1, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(adv, expected)
    by_position, _ = _call("optimal_token_baseline", rewards, mask, index, pi, sum_pi_sq)
    assert by_position[1, 1].item() == 0.0  # b's second token meets a's hole: B = 0 * 1.0 / 1.0
    torch.testing.assert_close(returns, torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0] * 4]).double())


def test_otb_specs_require_the_actors_sum_pi_squared():
    for name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        spec = ADV_ESTIMATORS.spec(name)
        assert spec.requires == (("actor_rollout_ref.actor.calculate_sum_pi_squared", True),)
        assert {"old_log_probs", "sum_pi_squared"} <= set(spec.inputs)
