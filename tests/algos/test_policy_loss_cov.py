"""clip_cov and kl_cov: which tokens the covariance picks, and what happens to them, by hand."""

import math

import torch

from verl_lite.algos import POLICY_LOSSES

clip_cov = POLICY_LOSSES.get("clip_cov")
kl_cov = POLICY_LOSSES.get("kl_cov")


def _case(adv_last):
    # 4 valid tokens and one masked token with garbage (A = 20, logp = 0) that must not enter the means
    logp = torch.tensor([[-0.5, -1.5, -0.5, -2.0, 0.0]], requires_grad=True)
    adv = torch.tensor([[2.0, 2.0, -2.0, adv_last, 20.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    return logp, adv, mask


def _old(logp, ratios):
    return logp.detach() - torch.tensor([ratios]).log()


def test_clip_cov_cuts_the_gradient_of_the_high_covariance_unclipped_token():
    # A = [2, 2, -2, -1]: mean 0.25; logp mean -1.125 (valid tokens only)
    # cov = (A - 0.25)(logp + 1.125) = [1.09375, -0.65625, -1.40625, 1.09375]; bounds (1, 5): tokens 0, 3
    # r = [1.5, 1, 0.9, 1]: token 0 is clipped by the ratio (A > 0, r > 1.2) -> not a candidate
    # k = max(int(0.25 * 4), 1) = 1 >= 1 candidate -> token 3 is cut
    # loss = max(-A r, -A clip(r)) = [-2.4, -2, 1.8, 1 -> 0 (cut)]; gradient -A r where unclipped and uncut:
    #   [0 (ratio-clipped), -2, 1.8, 0 (cut)]
    # with the masked token in the means (A mean 4.2, logp mean -0.9) token 3's cov would be 5.72 > 5
    logp, adv, mask = _case(-1.0)
    old = _old(logp, [1.5, 1.0, 0.9, 1.0, 1.0])
    kw = dict(clip_ratio_low=0.2, clip_ratio_high=0.2, clip_cov_ratio=0.25, clip_cov_lb=1.0, clip_cov_ub=5.0)
    out = clip_cov(old, logp, adv, mask, **kw)
    torch.testing.assert_close(out["pg_loss"] * mask, torch.tensor([[-2.4, -2.0, 1.8, 0.0, 0.0]]))
    torch.testing.assert_close(out["clipped"] * mask, torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0]]))
    (out["pg_loss"] * mask).sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -2.0, 1.8, 0.0, 0.0]]))


def test_clip_cov_draws_k_of_more_candidates():
    # 10 valid tokens whose covariance is 2 each (inside (1, 5)): A = +-2 around 0, logp = +-1 around 0
    # in step, none clipped by the ratio (r = 1); k = max(int(0.2 * 10), 1) = 2 are cut, at random
    adv = torch.tensor([[2.0, -2.0] * 5])
    logp = torch.tensor([[1.0, -1.0] * 5])
    mask = torch.ones(1, 10)
    torch.manual_seed(0)
    picks = set()
    for _ in range(20):
        out = clip_cov(logp, logp, adv, mask, clip_cov_ratio=0.2, clip_cov_lb=1.0, clip_cov_ub=5.0)
        cut = out["clipped"][0].nonzero().squeeze(-1).tolist()
        assert len(cut) == 2
        torch.testing.assert_close(out["pg_loss"][0, cut], torch.zeros(2))
        picks.add(tuple(cut))
    assert len(picks) > 1, "the cut tokens are drawn at random"


def test_kl_cov_penalises_the_top_covariance_tokens():
    # A = [2, 2, -2, -1.5]: mean 0.125; logp mean -1.125
    # cov = (A - 0.125)(logp + 1.125) = [1.171875, -0.703125, -1.328125, 1.421875]
    # r = [1.5, 1, 0.9, 1.2]; no clipping: loss = -A r = [-3, -2, 1.8, 1.8]
    # k = max(1, int(4 * 0.25)) = 1: token 3 gets + 0.1 |log 1.2|; gradient there -A r + 0.1 = 1.9
    # k = int(4 * 0.5) = 2: tokens 3 and 0; token 0: -3 + 0.1 log 1.5
    logp, adv, mask = _case(-1.5)
    old = _old(logp, [1.5, 1.0, 0.9, 1.2, 1.0])
    out = kl_cov(old, logp, adv, mask, kl_cov_ratio=0.25, ppo_kl_coef=0.1)
    expected = torch.tensor([[-3.0, -2.0, 1.8, 1.8 + 0.1 * math.log(1.2), 0.0]])
    torch.testing.assert_close(out["pg_loss"] * mask, expected)
    torch.testing.assert_close(out["approx_kl"], (logp - old).abs().detach())
    assert set(out) == {"pg_loss", "approx_kl"}, "kl_cov reports no clip fraction, as in verl"
    (out["pg_loss"] * mask).sum().backward()
    torch.testing.assert_close(logp.grad * mask, torch.tensor([[-3.0, -2.0, 1.8, 1.9, 0.0]]))
    two = kl_cov(old, logp, adv, mask, kl_cov_ratio=0.5, ppo_kl_coef=0.1)["pg_loss"] * mask
    expected[0, 0] = -3.0 + 0.1 * math.log(1.5)
    torch.testing.assert_close(two, expected)


def test_cov_losses_depend_on_the_micro_batch_split_and_say_so():
    # the same two rows scored together or one at a time pick different tokens
    logp = torch.tensor([[-0.5, -1.5], [-0.5, -2.0]])
    adv = torch.tensor([[2.0, 2.0], [-2.0, -1.5]])
    old = logp - torch.tensor([[0.4, 0.0], [-0.1, 0.2]])
    mask = torch.ones(2, 2)
    whole = kl_cov(old, logp, adv, mask, kl_cov_ratio=0.25, ppo_kl_coef=0.1)["pg_loss"]
    split = torch.cat(
        [
            kl_cov(old[i : i + 1], logp[i : i + 1], adv[i : i + 1], mask[i : i + 1], 0.25, 0.1)["pg_loss"]
            for i in (0, 1)
        ]
    )
    assert not torch.equal(whole, split)
    assert (
        not POLICY_LOSSES.spec("kl_cov").split_invariant
        and not POLICY_LOSSES.spec("clip_cov").split_invariant
    )
