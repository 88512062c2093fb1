"""The critic's clipped value loss and explained variance, by hand."""

import math

import pytest
import torch

from verl_lite.algos.loss_agg import LossScale, agg_loss
from verl_lite.algos.value_loss import compute_value_loss_terms, explained_variance


def test_clipped_value_loss_by_hand():
    # clip range 0.5 around the old value v:
    #   vpred 2.0, v 1.0, R 3.0: clipped pred 1.5; (2-3)^2 = 1, (1.5-3)^2 = 2.25 -> 0.5*2.25, clipped
    #   vpred 2.0, v 1.0, R 0.0: (2-0)^2 = 4, (1.5-0)^2 = 2.25 -> 0.5*4, not clipped
    #   vpred 0.8, v 1.0, R 5.0: inside the range, both 17.64 -> 8.82, not clipped
    #   vpred -1.0, v 0.0, R 0.0: clipped pred -0.5; 1 vs 0.25 -> 0.5, not clipped
    vpreds = torch.tensor([[2.0, 2.0, 0.8, -1.0]])
    values = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    returns = torch.tensor([[3.0, 0.0, 5.0, 0.0]])
    terms = compute_value_loss_terms(vpreds, values, returns, cliprange_value=0.5)
    torch.testing.assert_close(terms["vf_loss"], torch.tensor([[1.125, 2.0, 8.82, 0.5]]))
    torch.testing.assert_close(terms["vf_clipped"], torch.tensor([[1.0, 0.0, 0.0, 0.0]]))


def test_gradient_only_through_the_larger_term():
    # the clipped branch is constant in vpred once outside the range: no gradient there
    vpreds = torch.tensor([[2.0, 2.0]], requires_grad=True)
    terms = compute_value_loss_terms(vpreds, torch.ones(1, 2), torch.tensor([[3.0, 0.0]]), 0.5)
    terms["vf_loss"].sum().backward()
    # token 0: loss 0.5 (1.5 - 3)^2, clipped pred constant -> 0; token 1: d 0.5 (v - 0)^2 = v = 2
    torch.testing.assert_close(vpreds.grad, torch.tensor([[0.0, 2.0]]))


def test_aggregates_exactly_under_splits():
    g = torch.Generator().manual_seed(0)
    vpreds, values, returns = (torch.randn(6, 4, generator=g) for _ in range(3))
    mask = (torch.arange(4) < torch.tensor([[4], [1], [3], [2], [4], [1]])).float()
    loss = compute_value_loss_terms(vpreds, values, returns, 0.2)["vf_loss"]
    scale = LossScale.of(mask)
    whole = agg_loss(loss, mask, "token-mean")
    parts = agg_loss(loss[:2], mask[:2], "token-mean", scale) + agg_loss(
        loss[2:], mask[2:], "token-mean", scale
    )
    torch.testing.assert_close(parts, whole)


def test_explained_variance_by_hand():
    # valid returns [1, 2, 3] (unbiased var 1); values [1, 2, 2] -> residuals [0, 0, 1], var 1/3
    # -> 1 - (1/3) / (1 + 1e-5); the padded token (value 100) is ignored
    returns = torch.tensor([[1.0, 2.0], [3.0, 0.0]])
    values = torch.tensor([[1.0, 2.0], [2.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert explained_variance(values, returns, mask) == pytest.approx(1 - (1 / 3) / (1 + 1e-5))
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert math.isnan(explained_variance(values, returns, torch.tensor([[1.0, 0.0], [0.0, 0.0]])))
