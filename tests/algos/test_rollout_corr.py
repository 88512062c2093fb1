"""Rollout correction against verl's formulas (rollout_corr_helper.py, core_algos.py at b178a3c), with
every expected number worked out here from the ratios r = pi_train / pi_rollout.

Two responses: row 0 has ratios (3, 0.5, 1), row 1 has (1.5, 1) and one padding position.
"""

import math

import pytest
import torch

from verl_lite.algos.policy_loss_bypass import compute_bypass_terms
from verl_lite.algos.rollout_corr import (
    compute_rollout_correction,
    is_problems,
    is_weights,
    offpolicy_metrics,
    weighted_pg_loss,
)
from verl_lite.algos.rollout_rs import parse_thresholds, rejection_mask, rs_problems
from verl_lite.config.schema_trainer import RolloutCorrectionConfig as correction

R = [[3.0, 0.5, 1.0], [1.5, 1.0, 1.0]]
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
LOG_RATIO = torch.log(torch.tensor(R))
ROLLOUT = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.25, -9.0]])
TRAIN = ROLLOUT + LOG_RATIO
TOKENS = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]


def test_token_is_truncates_each_ratio_and_reports_the_untruncated_statistics():
    w, m = is_weights(LOG_RATIO, MASK, "token", 2.0)
    assert torch.allclose(w, torch.tensor([[2.0, 0.5, 1.0], [1.5, 1.0, 0.0]]))
    assert m["rollout_is_mean"] == pytest.approx(7 / 5)  # (3 + .5 + 1 + 1.5 + 1) / 5, before truncation
    assert m["rollout_is_max"] == pytest.approx(3) and m["rollout_is_min"] == pytest.approx(0.5)
    assert m["rollout_is_ratio_fraction_high"] == pytest.approx(1 / 5)  # 3 > 2
    assert m["rollout_is_ratio_fraction_low"] == 0.0  # 0.5 is not below 1/2
    # std and ESS on the weights clamped to [1/2, 2]: 2, .5, 1, 1.5, 1 (mean 1.2, E[x^2] 1.7)
    assert m["rollout_is_std"] == pytest.approx(math.sqrt(1.7 - 1.2**2))
    assert m["rollout_is_eff_sample_size"] == pytest.approx(1 / (1.7 / 1.2**2), rel=1e-6)
    # per sequence: mean of the untruncated weights over its tokens: 4.5 / 3 and 2.5 / 2
    assert m["rollout_is_seq_mean"] == pytest.approx((1.5 + 1.25) / 2)
    assert m["rollout_is_seq_max"] == pytest.approx(1.5) and m["rollout_is_seq_min"] == pytest.approx(1.25)
    assert m["rollout_is_seq_max_deviation"] == pytest.approx(0.5)
    assert m["rollout_is_seq_fraction_high"] == m["rollout_is_seq_fraction_low"] == 0.0
    assert not w.requires_grad


def test_sequence_is_is_the_truncated_product_broadcast_over_the_sequence():
    log_ratio = torch.log(torch.tensor([[3.0, 2.0, 1.0], [0.5, 0.5, 7.0]]))  # products 6 and 0.25
    w, m = is_weights(log_ratio, MASK, "sequence", 2.0)
    assert torch.allclose(w, torch.tensor([[2.0, 2.0, 2.0], [0.25, 0.25, 0.0]]))
    assert m["rollout_is_max"] == pytest.approx(6) and m["rollout_is_min"] == pytest.approx(0.25)
    assert m["rollout_is_mean"] == pytest.approx((3 * 6 + 2 * 0.25) / 5)
    assert m["rollout_is_ratio_fraction_high"] == 0.5 and m["rollout_is_ratio_fraction_low"] == 0.5


def test_batch_normalization_divides_by_the_mean_weight_of_tokens_or_of_sequences():
    w, m = is_weights(LOG_RATIO, MASK, "token", 2.0, batch_normalize=True)
    assert m["rollout_is_batch_norm_factor"] == pytest.approx(1.2)  # (2 + .5 + 1 + 1.5 + 1) / 5
    assert torch.allclose(w, torch.tensor([[2.0, 0.5, 1.0], [1.5, 1.0, 0.0]]) / 1.2)
    log_ratio = torch.log(torch.tensor([[3.0, 2.0, 1.0], [0.5, 0.5, 7.0]]))
    w, m = is_weights(log_ratio, MASK, "sequence", 2.0, batch_normalize=True)
    assert m["rollout_is_batch_norm_factor"] == pytest.approx((2 + 0.25) / 2)  # one weight per sequence
    assert w[0, 0] == pytest.approx(2 / 1.125) and w[1, 2] == 0


def test_token_k1_keeps_ratios_between_the_reciprocals_of_its_bounds():
    # k1 = -log r kept within [log .6, log 2.5]: r within [1/2.5, 1/.6] = [.4, 1.67]; r = 3 is dropped
    kept, m = rejection_mask(LOG_RATIO, MASK, "token_k1", "0.6_2.5")
    assert kept.tolist() == [[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
    assert m["rollout_rs_masked_fraction"] == pytest.approx(1 / 5)
    assert m["rollout_rs_seq_masked_fraction"] == pytest.approx(1 / 2)
    assert m["rollout_rs_token_k1_mean"] == pytest.approx(-math.log(2.25) / 5)  # mean of -log r
    assert m["rollout_rs_token_k1_fraction_low"] == pytest.approx(1 / 5)  # -log 3 < log .6
    assert m["rollout_rs_token_k1_max"] == pytest.approx(math.log(2)) and m["rollout_rs_token_k1_min"] == (
        pytest.approx(-math.log(3))
    )


def test_sequence_options_keep_or_drop_whole_sequences():
    k3 = [[r - 1 - math.log(r) for r in row] for row in R]
    seq_mean = [sum(k3[0]) / 3, sum(k3[1][:2]) / 2]  # .3648 and .0473
    kept, m = rejection_mask(LOG_RATIO, MASK, "seq_mean_k3", 0.1)
    assert kept.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]
    assert m["rollout_rs_seq_mean_k3_max"] == pytest.approx(seq_mean[0], rel=1e-5)
    assert m["rollout_rs_seq_mean_k3_seq_mean"] == pytest.approx(sum(seq_mean) / 2, rel=1e-5)
    assert m["rollout_rs_masked_fraction"] == pytest.approx(3 / 5)
    # a chain: every option must keep a token; seq_max_k2 drops row 0 (max (log 3)^2 / 2 = .60 > .5)
    kept, m = rejection_mask(LOG_RATIO, MASK, "token_k1,seq_max_k2", "0.6_2.5,0.5")
    assert kept.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]
    assert m["rollout_rs_seq_max_k2_seq_masked_fraction"] == 0.5
    assert m["rollout_rs_token_k1_masked_fraction"] == pytest.approx(1 / 5)
    # seq_sum_k1 with one bound: lower = 1 / upper; row sums of -log r: -log 1.5 both
    kept, _ = rejection_mask(LOG_RATIO, MASK, "seq_sum_k1", 1.2)
    assert kept.tolist() == [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]  # -log 1.5 = -.405 < log(1/1.2) = -.182


def test_threshold_specs_follow_verls_rules_and_bad_ones_are_one_line_each():
    assert parse_thresholds(["token_k1", "seq_max_k3"], "0.5_2,3") == {
        "token_k1": (0.5, 2.0),
        "seq_max_k3": (None, 3.0),
    }
    assert parse_thresholds(["seq_mean_k1"], 4) == {"seq_mean_k1": (0.25, 4.0)}
    assert rs_problems("token_k2", "0.1_2")[0].endswith("token_k2 takes one upper bound, not '0.1_2'")
    assert "not among" in rs_problems("token_k4", 1.0)[0]
    assert "rollout_rs_threshold is null" in rs_problems("token_k1", None)[0]
    assert "one per option" in rs_problems("token_k1,token_k2", "1,2,3")[0]
    assert "positive" in rs_problems("seq_max_k2", -1)[0]
    assert rs_problems(None, None) == [] and is_problems(None, -5) == []
    assert "not one of ['token', 'sequence']" in is_problems("geometric", 2.0)[0]
    assert "positive" in is_problems("token", 0)[0]


def test_offpolicy_metrics_are_verls_diagnostics():
    m = offpolicy_metrics(TRAIN, ROLLOUT, MASK)
    logs = [math.log(R[i][j]) for i, j in TOKENS]
    assert m["kl"] == pytest.approx(-sum(logs) / 5, rel=1e-6)
    assert m["k3_kl"] == pytest.approx(sum(math.exp(x) - 1 - x for x in logs) / 5, rel=1e-5)
    assert m["chi2_token"] == pytest.approx((9 + 0.25 + 1 + 2.25 + 1) / 5 - 1, rel=1e-5)
    assert m["chi2_seq"] == pytest.approx(1.5**2 - 1, rel=1e-5)  # both rows' products are 1.5
    train_means = [sum(TRAIN[0].tolist()) / 3, sum(TRAIN[1, :2].tolist()) / 2]
    rollout_means = [sum(ROLLOUT[0].tolist()) / 3, sum(ROLLOUT[1, :2].tolist()) / 2]
    assert m["training_ppl"] == pytest.approx(sum(math.exp(-x) for x in train_means) / 2, rel=1e-5)
    assert m["rollout_log_ppl"] == pytest.approx(-sum(rollout_means) / 2, rel=1e-6)
    diffs = [r - t for r, t in zip(rollout_means, train_means)]
    assert m["log_ppl_diff"] == pytest.approx(sum(diffs) / 2, rel=1e-5)
    assert m["ppl_ratio"] == pytest.approx(sum(math.exp(d) for d in diffs) / 2, rel=1e-5)


def test_the_combined_correction_prefixes_every_metric_and_keeps_the_mask_without_rejection():
    weights, kept, m = compute_rollout_correction(TRAIN, ROLLOUT, MASK, correction(rollout_is="token"))
    assert torch.equal(kept, MASK) and weights is not None
    assert all(k.startswith("rollout_corr/") for k in m)
    assert {"rollout_corr/rollout_is_mean", "rollout_corr/kl", "rollout_corr/chi2_seq"} <= set(m)
    none, kept, m = compute_rollout_correction(
        TRAIN, ROLLOUT, MASK, correction(rollout_rs="token_k1", rollout_rs_threshold=2)
    )
    assert none is None and "rollout_corr/rollout_rs_masked_fraction" in m and kept[0, 0] == 0


def test_weights_scale_token_losses_and_the_geometric_mean_scales_sequence_losses():
    loss = torch.ones(2, 3)
    w = torch.tensor([[2.0, 0.5, 1.0], [4.0, 1.0, 0.0]])
    assert torch.equal(weighted_pg_loss(loss, w, MASK, "token"), w)
    seq = weighted_pg_loss(loss, w, MASK, "sequence")  # exp(mean log w): 1 and 2
    assert seq[0].tolist() == pytest.approx([1.0] * 3, rel=1e-6) and seq[1, 0] == pytest.approx(2.0, rel=1e-6)


def test_bypass_reinforce_weights_log_pi_and_ppo_clip_uses_the_rollout_as_anchor():
    logp = TRAIN.clone().requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    c = correction(bypass_mode=True, loss_type="reinforce", rollout_is="token")
    terms, kept, m = compute_bypass_terms(logp, ROLLOUT, adv, MASK, c, {})
    w = torch.tensor([[2.0, 0.5, 1.0], [1.5, 1.0, 0.0]])
    assert torch.allclose(terms["pg_loss"], -adv * TRAIN * w)
    (terms["pg_loss"] * kept).sum().backward()
    assert torch.allclose(logp.grad, -adv * w * MASK), "the weights carry no gradient"
    assert torch.allclose(terms["approx_kl"], -LOG_RATIO) and "rollout_corr/rollout_is_mean" in m
    c = correction(
        bypass_mode=True,
        loss_type="ppo_clip",
        rollout_is="token",
        rollout_rs="token_k1",
        rollout_rs_threshold="0.6_2.5",
    )
    clip = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "clip_ratio_c": 3.0}
    terms, kept, _ = compute_bypass_terms(TRAIN, ROLLOUT, adv, MASK, c, clip)
    # ratio r against the rollout, clipped to [.8, 1.2] on the pessimistic side; no IS weights
    expected = torch.maximum(-adv * torch.tensor(R), -adv * torch.tensor(R).clamp(0.8, 1.2))
    expected = torch.where(adv < 0, torch.minimum(expected, -adv * 3.0), expected)
    assert torch.allclose(terms["pg_loss"], expected)
    assert kept.tolist() == [[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]], "rejection masks the loss"
