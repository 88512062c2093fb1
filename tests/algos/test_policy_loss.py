"""Policy losses against hand-computed values: PPO clip / clip-higher / dual clip, GSPO's sequence-level
ratio (its gradient and exactness under micro-batch splits) and GMPO's geometric mean (geo_mean)."""

import math

import pytest
import torch

from verl_lite.algos import POLICY_LOSSES
from verl_lite.algos.loss_agg import LOSS_AGG_MODES, LossScale, agg_loss
from verl_lite.algos.policy_loss import compute_policy_loss_vanilla

gspo = POLICY_LOSSES.get("gspo")
geo_mean = POLICY_LOSSES.get("geo_mean")


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


def test_dual_clip_cuts_the_gradient_of_capped_negative_advantages():
    # A = -1: r = 4 is capped at c = 3 (constant: no gradient); r = 1.5 is below the cap:
    # loss = -A r = r, d/dlogp = r = 1.5. A = +1 with r = 4 is not dual-clipped (only A < 0 is).
    logp = torch.tensor([[math.log(4.0), math.log(1.5)]], requires_grad=True)
    out = compute_policy_loss_vanilla(torch.zeros(1, 2), logp, -torch.ones(1, 2), clip_ratio_c=3.0)
    out["pg_loss"].sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, 1.5]]))
    torch.testing.assert_close(out["clipped_lower"], torch.tensor([[1.0, 0.0]]))
    positive = compute_policy_loss_vanilla(
        torch.zeros(1, 1), torch.tensor([[math.log(4.0)]]), torch.ones(1, 1)
    )
    assert positive["clipped_lower"].item() == 0.0 and positive["pg_loss"].item() == pytest.approx(-1.2)


def test_dual_clip_cap_must_exceed_one():
    with pytest.raises(ValueError, match="clip_ratio_c=1.0 must be > 1"):
        compute_policy_loss_vanilla(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), clip_ratio_c=1.0)


# --- GSPO ---


def test_sequence_ratio_clip_and_gradient_by_hand():
    # row 0: token log-ratios [0.2, 0.4, (5.0 masked)], A = +1
    #   s = exp(mean(0.2, 0.4)) = exp(0.3) = 1.34986 > 1 + 0.2 -> loss -1.2 on both tokens, clipped
    #   (the masked 5.0 must not enter the mean: with it s would be exp(1.87))
    # row 1: token log-ratios [-0.1, 0.1, 0.0], A = -2 -> s = exp(0) = 1 -> loss 2, not clipped
    # gradient under seq-mean-token-mean over N = 2 rows: row 0 clipped -> 0;
    #   row 1 token t: d(-A s_t)/dlogp_t = -A s = 2, times 1/|y| = 1/3, times 1/N = 1/2 -> 1/3
    old = torch.zeros(2, 3)
    logp = torch.tensor([[0.2, 0.4, 5.0], [-0.1, 0.1, 0.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    out = gspo(
        old_log_prob=old,
        log_prob=logp,
        advantages=adv,
        response_mask=mask,
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
    )
    torch.testing.assert_close(out["pg_loss"] * mask, torch.tensor([[-1.2, -1.2, 0.0], [2.0, 2.0, 2.0]]))
    torch.testing.assert_close(out["clipped"] * mask, torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    assert (out["clipped_lower"] == 0).all()
    agg_loss(out["pg_loss"], mask, "seq-mean-token-mean").backward()
    third = 1 / 3
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, 0.0, 0.0], [third, third, third]]))


def test_the_papers_clip_is_tiny():
    # the GSPO paper's 3e-4 / 4e-4 (set explicitly, as verl's gspo examples do): a sequence ratio
    # exp(5e-4) = 1.0005 is already clipped at 1.0004 for A > 0
    out = gspo(
        old_log_prob=torch.zeros(1, 2),
        log_prob=torch.full((1, 2), 5e-4),
        advantages=torch.ones(1, 2),
        response_mask=torch.ones(1, 2),
        clip_ratio_low=3e-4,
        clip_ratio_high=4e-4,
    )
    torch.testing.assert_close(out["pg_loss"], torch.full((1, 2), -1.0004))
    assert out["clipped"].sum() == 2


def test_gspo_and_geo_mean_fix_their_aggregation_as_verl_does():
    assert POLICY_LOSSES.spec("gspo").agg_mode == "seq-mean-token-mean"
    assert POLICY_LOSSES.spec("geo_mean").agg_mode == "seq-mean-token-mean"
    assert POLICY_LOSSES.spec("vanilla").agg_mode is None  # loss_agg_mode decides


def test_gradient_is_that_of_the_sequence_objective():
    # unclipped (wide clip), per-sequence advantage: the token-level straight-through form must give
    # exactly the gradient of J = mean_i -A_i exp(mean_t(logp - old)) under seq-mean-token-mean
    g = torch.Generator().manual_seed(1)
    old = -torch.rand(4, 5, generator=g)
    logp = (old + 0.1 * torch.randn(4, 5, generator=g)).requires_grad_(True)
    mask = (torch.arange(5) < torch.tensor([[5], [3], [1], [4]])).float()
    adv = torch.tensor([[1.5], [-0.5], [2.0], [-1.0]]).expand(4, 5)
    out = gspo(
        old_log_prob=old,
        log_prob=logp,
        advantages=adv,
        response_mask=mask,
        clip_ratio_low=10.0,
        clip_ratio_high=10.0,
    )
    (grad,) = torch.autograd.grad(agg_loss(out["pg_loss"], mask, "seq-mean-token-mean"), logp)
    logp2 = logp.detach().clone().requires_grad_(True)
    seq = torch.exp(((logp2 - old) * mask).sum(-1) / mask.sum(-1))
    (expected,) = torch.autograd.grad((-adv[:, 0] * seq).mean(), logp2)
    torch.testing.assert_close(grad, expected)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batch_shares_sum_to_the_full_batch(mode):
    g = torch.Generator().manual_seed(0)
    rows, width = 7, 6
    old = -torch.rand(rows, width, generator=g)
    logp = (old + 0.05 * torch.randn(rows, width, generator=g)).requires_grad_(True)
    lengths = torch.tensor([6, 1, 4, 2, 6, 3, 5])
    mask = (torch.arange(width) < lengths.unsqueeze(1)).float()
    adv = torch.randn(rows, 1, generator=g).expand(rows, width)
    kw = dict(clip_ratio_low=0.02, clip_ratio_high=0.03)  # some sequences clip, some do not

    def share(sl, scale, cols):
        out = gspo(
            old_log_prob=old[sl, :cols],
            log_prob=logp[sl, :cols],
            advantages=adv[sl, :cols],
            response_mask=mask[sl, :cols],
            **kw,
        )
        return agg_loss(out["pg_loss"], mask[sl, :cols], mode, scale)

    whole = share(slice(None), LossScale.of(mask), width)
    (whole_grad,) = torch.autograd.grad(whole, logp)
    scale = LossScale.of(mask)  # counts of the whole mini-batch, as the actor all-reduces them
    for parts in ([3, 4], [1, 2, 4], [1] * 7):
        start, total = 0, 0.0
        for size in parts:
            sl = slice(start, start + size)
            total = total + share(sl, scale, int(lengths[sl].max()))  # each micro-batch at its own width
            start += size
        (grad,) = torch.autograd.grad(total, logp)
        torch.testing.assert_close(total, whole, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(grad, whole_grad, rtol=1e-6, atol=1e-7)
    clipped = gspo(old_log_prob=old, log_prob=logp, advantages=adv, response_mask=mask, **kw)["clipped"]
    assert 0 < (clipped * mask).sum() < mask.sum(), "the case must mix clipped and unclipped sequences"


# --- GMPO (geo_mean) ---


def test_geo_mean_by_hand():
    # clip 0.2 both sides, in log space: d' = d clipped on the pessimistic side only
    # row 0, A = +1, d = [0.3, -0.1, (2.0 masked)]: d' = [min(0.3, 0.2), min(-0.1, -0.1)] = [0.2, -0.1]
    #   ratio = exp(0.1 / 2) = exp(0.05), Abar = 1 -> loss_0 = -exp(0.05); token 0 clipped (A > 0)
    # row 1, A = -2, d = [-0.5, 0.1, 0.0]: for A < 0, d' = max(d, clip(d)) = [-0.2, 0.1, 0.0]
    #   ratio = exp(-0.1 / 3), Abar = -2 -> loss_1 = 2 exp(-1/30); token 0 clipped_lower (A < 0)
    # aggregated seq-mean-token-mean = (loss_0 + loss_1) / 2
    # gradient: clipped tokens 0; row 0 token 1: -exp(0.05) / 2 tokens / 2 rows;
    #   row 1 tokens 1, 2: 2 exp(-1/30) / 3 tokens / 2 rows
    old = torch.zeros(2, 3)
    logp = torch.tensor([[0.3, -0.1, 2.0], [-0.5, 0.1, 0.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    out = geo_mean(old, logp, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.2)
    loss0, loss1 = -math.exp(0.05), 2 * math.exp(-1 / 30)
    torch.testing.assert_close(out["pg_loss"][:, 0], torch.tensor([loss0, loss1]))
    torch.testing.assert_close(out["clipped"] * mask, torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    torch.testing.assert_close(out["clipped_lower"] * mask, torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]))
    torch.testing.assert_close(out["approx_kl"], -logp.detach())
    total = agg_loss(out["pg_loss"], mask, "seq-mean-token-mean")
    torch.testing.assert_close(total, torch.tensor((loss0 + loss1) / 2))
    total.backward()
    g0, g1 = -math.exp(0.05) / 4, 2 * math.exp(-1 / 30) / 6
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, g0, 0.0], [0.0, g1, g1]]))


def test_geo_mean_is_a_sequence_loss_under_any_split():
    # the sequence loss sits on every token of its row: shares of any row split sum to the whole
    g = torch.Generator().manual_seed(2)
    old = -torch.rand(5, 4, generator=g)
    logp = old + 0.3 * torch.randn(5, 4, generator=g)
    mask = (torch.arange(4) < torch.tensor([[4], [2], [3], [1], [4]])).float()
    adv = torch.randn(5, 1, generator=g).expand(5, 4)
    out = geo_mean(old, logp, adv, mask, clip_ratio_low=0.1, clip_ratio_high=0.1)
    scale = LossScale.of(mask)
    whole = agg_loss(out["pg_loss"], mask, "seq-mean-token-mean", scale)
    parts = sum(
        agg_loss(
            geo_mean(old[s], logp[s], adv[s], mask[s], 0.1, 0.1)["pg_loss"],
            mask[s],
            "seq-mean-token-mean",
            scale,
        )
        for s in (slice(0, 2), slice(2, 3), slice(3, 5))
    )
    torch.testing.assert_close(parts, whole)
    assert 0 < (out["clipped"] + out["clipped_lower"]).sum(), "some tokens must be clipped"
