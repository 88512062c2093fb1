"""gpg, cispo and sapo against hand-computed losses and gradients."""

import math

import torch

from verl_lite.algos import POLICY_LOSSES


def _ratios(logp, ratios):
    """old log-probs that give these ratios at the current log-probs."""
    return logp.detach() - torch.tensor(ratios).log()


def test_gpg_is_reinforce_on_the_log_prob():
    # loss = -A logp: A = [2, -1], logp = [-0.5, -1.5] -> [1.0, -1.5]; gradient -A = [-2, 1]
    logp = torch.tensor([[-0.5, -1.5]], requires_grad=True)
    adv = torch.tensor([[2.0, -1.0]])
    out = POLICY_LOSSES.get("gpg")(torch.zeros(1, 2), logp, adv, torch.ones(1, 2))
    assert set(out) == {"pg_loss"}, "gpg reports no clip fraction or ppo_kl, as in verl"
    torch.testing.assert_close(out["pg_loss"], torch.tensor([[1.0, -1.5]]))
    out["pg_loss"].sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-2.0, 1.0]]))


def test_cispo_clipped_stop_gradient_weight_on_the_log_prob():
    # r = [1.5, 0.5, 1.1], clip 0.2 -> weight [1.2, 0.8, 1.1]; A = [1, 1, -2]; logp = [-1, -2, -0.5]
    # loss = -w A logp = [1.2, 1.6, -1.1]; gradient -w A = [-1.2, -0.8, 2.2] on every token (PPO would
    # give the clipped first two none); clipped = r outside [0.8, 1.2] = [1, 1, 0]
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    old = _ratios(logp, [[1.5, 0.5, 1.1]])
    adv = torch.tensor([[1.0, 1.0, -2.0]])
    out = POLICY_LOSSES.get("cispo")(
        old, logp, adv, torch.ones(1, 3), clip_ratio_low=0.2, clip_ratio_high=0.2
    )
    torch.testing.assert_close(out["pg_loss"], torch.tensor([[1.2, 1.6, -1.1]]))
    torch.testing.assert_close(out["clipped"], torch.tensor([[1.0, 1.0, 0.0]]))
    assert (out["clipped_lower"] == 0).all()
    torch.testing.assert_close(out["approx_kl"], -(logp - old).detach())
    out["pg_loss"].sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.2, -0.8, 2.2]]))


def test_sapo_soft_gate_value_and_gradient():
    # tau_pos = 2, tau_neg = 4; gate f(r) = sigmoid(tau (r - 1)) * 4 / tau, loss = -f(r) A
    # token 0: A = +1, r = 1: f = 0.5 * 2 = 1 -> loss -1; df/dr = 4 sigmoid'(0) = 1, dr/dlogp = r = 1
    #   -> gradient -A * 1 * 1 = -1 (PPO's on-policy gradient)
    # token 1: A = -1, r = 1.5: f = sigmoid(2) -> loss sigmoid(2) = 0.880797;
    #   df/dr = 4 sigmoid(2) (1 - sigmoid(2)), dr/dlogp = 1.5 -> gradient +6 s (1 - s) (PPO: 1.5)
    s = 1 / (1 + math.exp(-2))
    logp = torch.tensor([[-0.7, -0.2]], requires_grad=True)
    old = _ratios(logp, [[1.0, 1.5]])
    out = POLICY_LOSSES.get("sapo")(
        old, logp, torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), tau_pos=2.0, tau_neg=4.0
    )
    torch.testing.assert_close(out["pg_loss"], torch.tensor([[-1.0, s]]))
    assert (out["clipped"] == 0).all() and (out["clipped_lower"] == 0).all()
    out["pg_loss"].sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0, 6 * s * (1 - s)]]))


def test_sapo_zero_advantage_takes_tau_neg_and_fixes_its_aggregation():
    # A = 0 is not > 0, so tau_neg applies (verl's rule); the loss is 0 either way
    logp = torch.zeros(1, 1, requires_grad=True)
    out = POLICY_LOSSES.get("sapo")(torch.zeros(1, 1), logp, torch.zeros(1, 1), torch.ones(1, 1))
    assert out["pg_loss"].item() == 0.0
    assert POLICY_LOSSES.spec("sapo").agg_mode == "seq-mean-token-mean"
    assert POLICY_LOSSES.spec("sapo").config_keys == ("tau_pos", "tau_neg")
