"""Per-token statistics of the token distribution, by hand."""

import math

import torch

from verl_lite.algos.logprob import entropy_from_logits, logprobs_from_logits, sum_pi_squared_from_logits


def test_sum_pi_squared_by_hand():
    # logits [0, ln 3] -> probs [1/4, 3/4] -> 1/16 + 9/16 = 0.625; uniform over 5 -> 5 * (1/5)^2 = 0.2;
    # a shift of all logits changes nothing; a huge logit (1e4) must not overflow: -> 1
    logits = torch.tensor([[0.0, math.log(3.0), -1e9, -1e9, -1e9], [7.0] * 5, [1e4, 0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(sum_pi_squared_from_logits(logits), torch.tensor([0.625, 0.2, 1.0]))


def test_log_prob_and_entropy_by_hand():
    # probs [1/4, 3/4]: log-prob of token 1 = ln 3/4; entropy = -(1/4 ln 1/4 + 3/4 ln 3/4)
    logits = torch.tensor([[0.0, math.log(3.0)]])
    torch.testing.assert_close(
        logprobs_from_logits(logits, torch.tensor([1])), torch.tensor([math.log(0.75)])
    )
    entropy = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    torch.testing.assert_close(entropy_from_logits(logits), torch.tensor([entropy]))
