"""KL estimators against hand-computed values."""

import math

import pytest
import torch

from verl_lite.algos.kl import kl_penalty

LOGP = torch.tensor([-1.0, -2.0])
REF = torch.tensor([-2.0, -1.0])  # logp - ref = +1, -1


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("kl", [1.0, -1.0]),
        ("abs", [1.0, 1.0]),
        ("mse", [0.5, 0.5]),
        # k3 = exp(ref - logp) - (ref - logp) - 1: e^-1 + 1 - 1, e^1 - 1 - 1
        ("low_var_kl", [math.exp(-1), math.e - 2]),
    ],
)
def test_estimators(kind, expected):
    torch.testing.assert_close(kl_penalty(LOGP, REF, kind), torch.tensor(expected))


def test_low_var_kl_is_clamped():
    assert kl_penalty(torch.tensor([-30.0]), torch.tensor([0.0]), "low_var_kl").item() == 10.0


def test_straight_through_keeps_value_but_uses_k2_gradient():
    logp = LOGP.clone().requires_grad_(True)
    value = kl_penalty(logp, REF, "low_var_kl+")
    torch.testing.assert_close(value.detach(), kl_penalty(LOGP, REF, "low_var_kl"))
    value.sum().backward()
    torch.testing.assert_close(logp.grad, LOGP - REF)  # d/dlogp of 0.5 (logp - ref)^2


def test_unknown_type_is_named():
    with pytest.raises(ValueError, match="kl type 'k9'"):
        kl_penalty(LOGP, REF, "k9")
