"""dppo_tv, dppo_kl and dro against losses, gradients and metrics worked out by hand (verl 0.9.1's
formulas: core_algos.compute_policy_loss_dppo_tv / _dppo_kl / _dro)."""

import math

import pytest
import torch

from verl_lite.algos import POLICY_LOSSES
from verl_lite.algos.checks import _policy_loss
from verl_lite.config.schema import ActorConfig


def _probs(old, new):
    """(old log-probs, current log-probs with a gradient) of these token probabilities."""
    return torch.tensor([old]).log(), torch.tensor([new]).log().requires_grad_(True)


def test_dppo_tv_keeps_a_token_while_its_probability_moved_less_than_the_bound():
    # bounds 0.2 / 0.2, c = 3; per token (A, p_old, p):
    #  0 (+1, 0.5, 0.6):   p - p_old = 0.1 <= 0.2 kept; r = 1.2 -> loss -1.2 ln 0.6, gradient -1.2
    #  1 (+1, 0.3, 0.6):   0.3 > 0.2: outside, loss 0, gradient 0
    #  2 (-1, 0.5, 0.2):   -0.3 < -0.2: outside
    #  3 (-2, 0.1, 0.05):  -0.05 kept; r = 0.5 -> loss 2 * 0.5 ln 0.05 = ln 0.05, gradient +1
    #  4 (+1, 0.01, 0.05): 0.04 kept; r = 5 > c: weight 3 (truncated) -> loss -3 ln 0.05, gradient -3
    old, logp = _probs([0.5, 0.3, 0.5, 0.1, 0.01], [0.6, 0.6, 0.2, 0.05, 0.05])
    adv = torch.tensor([[1.0, 1.0, -1.0, -2.0, 1.0]])
    out = POLICY_LOSSES.get("dppo_tv")(old, logp, adv, torch.ones(1, 5), 0.2, 0.2, 3.0)
    want = [-1.2 * math.log(0.6), 0.0, 0.0, math.log(0.05), -3 * math.log(0.05)]
    torch.testing.assert_close(out["pg_loss"], torch.tensor([want]))
    torch.testing.assert_close(out["clipped"], torch.tensor([[0.0, 1.0, 1.0, 0.0, 0.0]]))
    torch.testing.assert_close(out["clipped_lower"], torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]]))
    torch.testing.assert_close(out["approx_kl"], (old - logp).detach())
    out["pg_loss"].sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.2, 0.0, 0.0, 1.0, -3.0]]))


def test_dppo_tv_bounds_are_asymmetric():
    # low 0.05, high 0.3: +0.2 kept for A > 0; -0.2 dropped for A < 0
    old, logp = _probs([0.5, 0.5], [0.7, 0.3])
    out = POLICY_LOSSES.get("dppo_tv")(
        old, logp, torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), 0.05, 0.3, 3.0
    )
    torch.testing.assert_close(out["clipped"], torch.tensor([[0.0, 1.0]]))


def binary_kl(p_old, p):
    return p_old * math.log(p_old / p) + (1 - p_old) * math.log((1 - p_old + 1e-8) / (1 - p + 1e-8))


def test_dppo_kl_bounds_the_two_outcome_kl_in_the_direction_of_the_advantage():
    # per token (A, p_old, p), bounds 0.2 / 0.2:
    #  0 (+1, 0.5, 0.6): KL 0.0204 kept; r = 1.2 -> loss -1.2 ln 0.6
    #  1 (+1, 0.1, 0.8): KL 1.146 and p rose: outside
    #  2 (+1, 0.9, 0.1): KL 1.758 but p fell (against A): kept; r = 1/9 -> loss -(1/9) ln 0.1
    #  3 (-1, 0.9, 0.1): KL 1.758 and p fell: outside
    #  4 (-1, 0.1, 0.8): p rose (against A): kept; r = 8 > c = 3 -> weight 3, loss 3 ln 0.8
    assert binary_kl(0.5, 0.6) == pytest.approx(0.0204, abs=1e-4) and binary_kl(0.1, 0.8) > 1
    old, logp = _probs([0.5, 0.1, 0.9, 0.9, 0.1], [0.6, 0.8, 0.1, 0.1, 0.8])
    adv = torch.tensor([[1.0, 1.0, 1.0, -1.0, -1.0]])
    out = POLICY_LOSSES.get("dppo_kl")(old, logp, adv, torch.ones(1, 5), 0.2, 0.2, 3.0)
    want = [-1.2 * math.log(0.6), 0.0, -(1 / 9) * math.log(0.1), 0.0, 3 * math.log(0.8)]
    torch.testing.assert_close(out["pg_loss"], torch.tensor([want]))
    torch.testing.assert_close(out["clipped"], torch.tensor([[0.0, 1.0, 0.0, 1.0, 0.0]]))
    torch.testing.assert_close(out["clipped_lower"], torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]]))
    out["pg_loss"].sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.2, 0.0, -1 / 9, 0.0, 3.0]]))


def test_dro_is_the_policy_gradient_with_a_quadratic_log_ratio_penalty():
    # logp = [-1, -2], old = [-1.5, -2], A = [2, -1], beta = 0.4:
    # loss = -(A logp - 0.2 (logp - old)^2) = [-(-2 - 0.05), -(2 - 0)] = [2.05, -2]
    # gradient = -(A - beta (logp - old)) = [-(2 - 0.2), 1] = [-1.8, 1]
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old = torch.tensor([[-1.5, -2.0]])
    out = POLICY_LOSSES.get("dro")(old, logp, torch.tensor([[2.0, -1.0]]), torch.ones(1, 2), dro_beta=0.4)
    assert set(out) == {"pg_loss", "approx_kl"}, "dro reports ppo_kl only, as in verl"
    torch.testing.assert_close(out["pg_loss"], torch.tensor([[2.05, -2.0]]))
    out["pg_loss"].sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.8, 1.0]]))


@pytest.mark.parametrize("beta", [None, 0.0, -1.0])
def test_dro_without_a_positive_beta_is_refused_naming_the_key(beta):
    actor = ActorConfig()
    actor.policy_loss.loss_mode, actor.policy_loss.dro_beta = "dro", beta
    [line] = _policy_loss(actor)
    assert line.startswith(f"actor_rollout_ref.actor.policy_loss.dro_beta={beta} must be set > 0")
    actor.policy_loss.dro_beta = 0.1
    assert _policy_loss(actor) == []


def test_dppo_weight_cap_must_be_positive():
    actor = ActorConfig()
    actor.policy_loss.loss_mode, actor.clip_ratio_c = "dppo_tv", 0.0
    [line] = _policy_loss(actor)
    assert line.startswith("actor_rollout_ref.actor.clip_ratio_c=0.0 must be > 0")
