"""verl's actor.loss_scale_factor: the constant seq-mean-token-sum-norm divides by (the response
length when null), worked by hand."""

import pytest
import torch

from tests.helpers.configs import tiny_actor
from verl_lite.algos.loss_agg import LossScale, agg_loss
from verl_lite.workers.actor import norm_length


def test_loss_scale_factor_is_seq_mean_token_sum_norms_divisor():
    assert norm_length(tiny_actor(), response_length=8) == 8
    assert norm_length(tiny_actor(loss_scale_factor=100), response_length=8) == 100
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    for factor, expected in ((None, 10.0 / (2 * 3)), (100, 10.0 / (2 * 100))):
        scale = LossScale(
            num_tokens=4, num_seqs=2, response_length=norm_length(tiny_actor(loss_scale_factor=factor), 3)
        )
        assert agg_loss(loss, mask, "seq-mean-token-sum-norm", scale).item() == pytest.approx(
            expected, rel=1e-6
        )
