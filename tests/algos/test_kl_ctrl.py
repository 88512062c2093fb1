"""KL controllers (fixed, adaptive) and the KL penalty in the reward, by hand."""

import math

import pytest
import torch

from verl_lite.algos.kl_ctrl import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    build_kl_controller,
)


def test_fixed_controller_never_moves():
    ctrl = build_kl_controller("fixed", kl_coef=0.05, target_kl=6.0, horizon=10000)
    assert isinstance(ctrl, FixedKLController)
    ctrl.update(current_kl=100.0, n_steps=64)
    assert ctrl.value == 0.05


def test_adaptive_controller_follows_ziegler():
    ctrl = build_kl_controller("adaptive", kl_coef=0.1, target_kl=2.0, horizon=100)
    assert isinstance(ctrl, AdaptiveKLController)
    # KL 2.5 vs target 2: error 0.25 -> clipped to 0.2; beta *= 1 + 0.2 * 10/100 = 1.02
    ctrl.update(current_kl=2.5, n_steps=10)
    assert ctrl.value == pytest.approx(0.102)
    # KL 1.8: error -0.1; beta *= 1 - 0.1 * 50/100 = 0.95
    ctrl.update(current_kl=1.8, n_steps=50)
    assert ctrl.value == pytest.approx(0.102 * 0.95)
    # KL 0: error -1 -> clipped to -0.2; beta *= 1 - 0.2 * 100/100 = 0.8
    ctrl.update(current_kl=0.0, n_steps=100)
    assert ctrl.value == pytest.approx(0.102 * 0.95 * 0.8)


def test_bad_controller_config_is_named():
    with pytest.raises(ValueError, match="algorithm.kl_ctrl.type='pid'"):
        build_kl_controller("pid", kl_coef=0.1)
    with pytest.raises(ValueError, match="horizon > 0"):
        build_kl_controller("adaptive", kl_coef=0.1, target_kl=1.0, horizon=0)
    with pytest.raises(ValueError, match="needs algorithm.kl_ctrl.target_kl"):
        build_kl_controller("adaptive", kl_coef=0.1)


def test_apply_kl_penalty_by_hand():
    # scores on the last valid token; old - ref per token:
    #   row 0: [0.5, -0.25, (3.0 padding)]  -> k1 [0.5, -0.25, 0], mean over 2 tokens 0.125
    #   row 1: [1.0, (2.0 padding), (2.0)]  -> k1 [1.0, 0, 0],     mean over 1 token  1.0
    # rewards = scores - 0.1 * k1; reward_kl_penalty = mean(0.125, 1.0) = 0.5625
    scores = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]])
    ref = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
    old = ref + torch.tensor([[0.5, -0.25, 3.0], [1.0, 2.0, 2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    rewards, metrics = apply_kl_penalty(scores, old, ref, mask, kl_coef=0.1, kl_penalty="kl")
    torch.testing.assert_close(rewards, torch.tensor([[-0.05, 1.025, 0.0], [1.9, 0.0, 0.0]]))
    assert metrics == {
        "actor/reward_kl_penalty": pytest.approx(0.5625),
        "actor/reward_kl_penalty_coeff": pytest.approx(0.1),
    }
    # low_var_kl: row 1 token 0, d = 1 -> e^-1 + 1 - 1 = e^-1
    rewards, _ = apply_kl_penalty(scores, old, ref, mask, kl_coef=1.0, kl_penalty="low_var_kl")
    assert rewards[1, 0].item() == pytest.approx(2.0 - math.exp(-1))


def test_controller_driven_by_the_penalty_metric():
    """The trainer's loop: penalise with ctrl.value, then update the controller with the batch KL."""
    ctrl = AdaptiveKLController(init_kl_coef=0.2, target_kl=0.1, horizon=8)
    mask = torch.ones(4, 2)
    _, metrics = apply_kl_penalty(
        torch.zeros(4, 2), torch.full((4, 2), 0.3), torch.zeros(4, 2), mask, ctrl.value
    )
    ctrl.update(metrics["actor/reward_kl_penalty"], n_steps=4)  # KL 0.3 vs 0.1: error +0.2 (clipped)
    assert ctrl.value == pytest.approx(0.2 * (1 + 0.2 * 4 / 8))
