"""KL estimators and their straight-through '+' variants against hand-computed values and gradients."""

import math

import pytest
import torch

from verl_lite.algos.kl import KL_TYPES, kl_penalty

LOGP = torch.tensor([-1.0, -2.0])
REF = torch.tensor([-2.0, -1.0])  # logp - ref = +1, -1

# value of each estimator at logp - ref = (+1, -1), and its gradient d/dlogp
K1 = ([1.0, -1.0], [1.0, 1.0])
ABS = ([1.0, 1.0], [1.0, -1.0])
K2 = ([0.5, 0.5], [1.0, -1.0])  # 0.5 d^2 -> d
# k3 = exp(-d) + d - 1: e^-1 + 1 - 1, e^1 - 1 - 1; gradient -exp(-d) + 1: 1 - e^-1, 1 - e
K3 = ([math.exp(-1), math.e - 2], [1 - math.exp(-1), 1 - math.e])


@pytest.mark.parametrize(
    "kind, value_grad",
    [("kl", K1), ("k1", K1), ("abs", ABS), ("mse", K2), ("k2", K2), ("low_var_kl", K3), ("k3", K3)],
)
def test_estimators_value_and_gradient(kind, value_grad):
    logp = LOGP.clone().requires_grad_(True)
    value = kl_penalty(logp, REF, kind)
    value.sum().backward()
    torch.testing.assert_close(value.detach(), torch.tensor(value_grad[0]))
    torch.testing.assert_close(logp.grad, torch.tensor(value_grad[1]))


@pytest.mark.parametrize(
    "kind, value",
    [
        ("kl+", K1[0]),
        ("k1+", K1[0]),
        ("abs+", ABS[0]),
        ("k3+", K3[0]),
        ("low_var_kl+", K3[0]),
        ("mse+", K2[0]),
        ("k2+", K2[0]),
    ],
)
def test_straight_through_keeps_value_but_takes_k2_gradient(kind, value):
    logp = LOGP.clone().requires_grad_(True)
    out = kl_penalty(logp, REF, kind)
    out.sum().backward()
    torch.testing.assert_close(out.detach(), torch.tensor(value))
    torch.testing.assert_close(logp.grad, torch.tensor(K2[1]))  # d/dlogp 0.5 (logp - ref)^2 = logp - ref


def test_low_var_kl_is_clamped():
    # logp - ref = -30: exponent clamped to 20 -> e^20 - 20 - 1, then clamped to 10
    assert kl_penalty(torch.tensor([-30.0]), torch.tensor([0.0]), "low_var_kl").item() == 10.0


@pytest.mark.parametrize("bad", ["k9", "k3++", "+", "full"])
def test_unknown_type_is_named(bad):
    with pytest.raises(ValueError, match=f"kl type '{bad}'".replace("+", r"\+")):
        kl_penalty(LOGP, REF, bad)
    assert bad not in KL_TYPES
