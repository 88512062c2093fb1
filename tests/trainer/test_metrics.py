"""Driver-side metrics by hand: verl's variance_proxy/* from the actor's sum_pi_squared."""

import math

import pytest
import torch

from verl_lite.protocol import DataProto
from verl_lite.trainer.metrics import compute_variance_proxy_metrics


def _batch(with_sum_pi_squared=True):
    # row 0: valid tokens pi = 0.5, 0.25 with sum pi^2 = 0.5, 0.25 -> w = 1 - 2 pi + sum pi^2 = 0.5, 0.75
    #   W_0 = 1.25; mean advantage (1 + 3) / 2 = 2.   row 1: pi = 0.8, sum pi^2 0.7 -> W_1 = 0.1; a_1 = -1
    # the padded positions (99, 9) must not count
    tensors = {
        "response_mask": torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]),
        "old_log_probs": torch.tensor([[0.5, 0.25, 0.5], [0.8, 0.5, 0.5]]).log(),
        "advantages": torch.tensor([[1.0, 3.0, 99.0], [-1.0, 99.0, 99.0]]),
    }
    if with_sum_pi_squared:
        tensors["sum_pi_squared"] = torch.tensor([[0.5, 0.25, 9.0], [0.7, 9.0, 9.0]])
    return DataProto.from_dict(tensors)


def test_variance_proxies_by_hand():
    # proxy2 = mean(a^2 W) = (4 * 1.25 + 1 * 0.1) / 2 = 2.55; E[a^2] = 2.5; E[W] = 0.675
    # grad_norm 1.5: proxy1 = 2.25, proxy3 = (2.55 - 2.25) / (2 - 1) = 0.3; grad_norm 2: proxy3 = max(0, -1.45)
    m = compute_variance_proxy_metrics(_batch(), grad_norm=1.5)
    assert m["variance_proxy/proxy2_total_power"] == pytest.approx(2.55, rel=1e-6)
    assert m["variance_proxy/proxy1_signal_strength"] == pytest.approx(2.25)
    assert m["variance_proxy/proxy3_pure_noise"] == pytest.approx(0.3, rel=1e-5)
    assert m["variance_proxy/expected_a_squared"] == pytest.approx(2.5)
    assert m["variance_proxy/expected_w"] == pytest.approx(0.675, rel=1e-6)
    assert compute_variance_proxy_metrics(_batch(), grad_norm=2.0)["variance_proxy/proxy3_pure_noise"] == 0.0
    no_norm = compute_variance_proxy_metrics(_batch(), grad_norm=None)  # e.g. a critic warm-up step
    assert (
        no_norm["variance_proxy/proxy1_signal_strength"] == 0.0
        and no_norm["variance_proxy/proxy3_pure_noise"] == 0.0
    )
    assert all(math.isfinite(v) for v in m.values())


def test_no_proxies_without_sum_pi_squared():
    assert compute_variance_proxy_metrics(_batch(with_sum_pi_squared=False), grad_norm=1.0) == {}
