"""Per-token results a causal LM's forward gives its caller, against softmax worked out directly."""

import torch

from verl_lite.engine.forward import MicroBatch, TokenRequest, response_token_outputs
from verl_lite.engine.micro_batch import MicroPlan


def test_token_outputs_are_those_of_softmax_of_logits_over_temperature_at_the_predicting_columns():
    g = torch.Generator().manual_seed(0)
    rows, cols, vocab, width = 3, 7, 11, 4  # micro-batch columns: 3 prompt, 4 response
    logits = torch.randn(rows, cols, vocab, generator=g)
    responses = torch.randint(0, vocab, (rows, width), generator=g)
    plan = MicroPlan(torch.arange(rows), start=0, width=width)
    micro = MicroBatch({"responses": responses}, plan, torch.arange(rows))
    out = response_token_outputs(
        logits, micro, TokenRequest(temperature=0.5, entropy=True, sum_pi_squared=True)
    )
    for i in range(rows):
        for t in range(width):
            p = torch.softmax(logits[i, cols - width - 1 + t] / 0.5, -1)  # column P + t - 1
            assert torch.allclose(out["log_probs"][i, t], p[responses[i, t]].log(), atol=1e-5)
            assert torch.allclose(out["entropy"][i, t], -(p * p.log()).sum(), atol=1e-5)
            assert torch.allclose(out["sum_pi_squared"][i, t], (p * p).sum(), atol=1e-6)
    plain = response_token_outputs(logits, micro, TokenRequest())
    assert set(plain) == {"log_probs"}, "entropy and sum_pi_squared only on request"
