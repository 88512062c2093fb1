"""The loss_agg_modes against hand-computed values, and their exactness under splitting."""

import pytest
import torch

from verl_lite.algos.loss_agg import LOSS_AGG_MODES, LossScale, agg_loss

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", (1 + 2 + 4) / 3),
        ("token-sum", 1 + 2 + 4),  # verl's core_algos token-sum: the valid tokens' sum, no denominator
        ("seq-mean-token-sum", ((1 + 2) + 4) / 2),
        ("seq-mean-token-mean", ((1 + 2) / 2 + 4 / 1) / 2),
        ("seq-mean-token-sum-norm", (1 + 2 + 4) / (2 * 3)),
    ],
)
def test_modes_by_hand(mode, expected):
    assert agg_loss(LOSS, MASK, mode).item() == pytest.approx(expected)


def test_sum_norm_divides_by_configured_length_not_tensor_width():
    scale = LossScale.of(MASK, response_length=4)
    assert agg_loss(LOSS, MASK, "seq-mean-token-sum-norm", scale).item() == pytest.approx(7 / 8)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_shares_of_any_split_sum_to_the_whole(mode):
    g = torch.Generator().manual_seed(0)
    loss = torch.randn(7, 5, generator=g)
    lengths = torch.randint(1, 6, (7,), generator=g)
    mask = (torch.arange(5).unsqueeze(0) < lengths.unsqueeze(1)).long()  # responses: valid prefix
    whole = agg_loss(loss, mask, mode)
    scale = LossScale.of(mask)
    for parts in ([7], [1, 6], [3, 2, 2], [1] * 7):
        shares, start = [], 0
        for size in parts:
            # each part padded to its own width, as dynamic batching would
            width = int(mask[start : start + size].sum(-1).max())
            shares.append(
                agg_loss(loss[start : start + size, :width], mask[start : start + size, :width], mode, scale)
            )
            start += size
        torch.testing.assert_close(sum(shares), whole, rtol=1e-6, atol=1e-6)


def test_own_counts_would_not_be_exact():
    """The naive per-micro-batch mean differs from the full-batch token mean: the reason for LossScale."""
    naive = (agg_loss(LOSS[:1], MASK[:1], "token-mean") + agg_loss(LOSS[1:], MASK[1:], "token-mean")) / 2
    assert naive.item() != pytest.approx(agg_loss(LOSS, MASK, "token-mean").item())
