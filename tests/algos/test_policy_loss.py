"""PPO's clipped surrogate (with dual clip) against hand-computed values."""

import math

import torch

from verl_lite.algos.policy_loss import compute_policy_loss_vanilla


def test_vanilla_clip_and_dual_clip_cases():
    # (ratio, advantage) -> loss, clipped, clipped_lower, worked out with clip 0.2 and c = 3:
    #   r=1.5 A=+1: max(-1.5, -1.2) = -1.2, clipped
    #   r=1.5 A=-1: max(1.5, 1.2) = 1.5, not clipped; dual min(1.5, 3) = 1.5
    #   r=4   A=-1: max(4, 1.2) = 4 -> dual min(4, 3) = 3, clipped_lower
    #   r=0.5 A=+1: max(-0.5, -0.8) = -0.5, not clipped
    #   r=0.5 A=-1: max(0.5, 0.8) = 0.8, clipped
    ratios = torch.tensor([[1.5, 1.5, 4.0, 0.5, 0.5]])
    adv = torch.tensor([[1.0, -1.0, -1.0, 1.0, -1.0]])
    old = torch.zeros_like(ratios)
    out = compute_policy_loss_vanilla(
        old, ratios.log(), adv, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0
    )
    torch.testing.assert_close(out["pg_loss"], torch.tensor([[-1.2, 1.5, 3.0, -0.5, 0.8]]))
    torch.testing.assert_close(out["clipped"], torch.tensor([[1.0, 0.0, 0.0, 0.0, 1.0]]))
    torch.testing.assert_close(out["clipped_lower"], torch.tensor([[0.0, 0.0, 1.0, 0.0, 0.0]]))
    torch.testing.assert_close(out["approx_kl"], -ratios.log())


def test_clip_higher_uses_separate_bounds():
    # r=1.25, A=+1: upper bound 1.28 does not clip -> -1.25; with high 0.2 it would be -1.2
    logp = torch.tensor([[math.log(1.25)]])
    out = compute_policy_loss_vanilla(
        torch.zeros(1, 1), logp, torch.ones(1, 1), clip_ratio_low=0.2, clip_ratio_high=0.28
    )
    torch.testing.assert_close(out["pg_loss"], torch.tensor([[-1.25]]))


def test_gradient_is_zero_where_clipped():
    logp = torch.tensor([[math.log(1.5), math.log(1.1)]], requires_grad=True)
    out = compute_policy_loss_vanilla(torch.zeros(1, 2), logp, torch.ones(1, 2))
    out["pg_loss"].sum().backward()
    # clipped token: no gradient; unclipped: d(-r)/dlogp = -r = -1.1
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -1.1]]))
