"""Token log-probabilities, entropies and sum of squared probabilities from logits, in fp32 for stability."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[labels]; logits (..., vocab), labels (...)."""
    logits = logits.float()
    return torch.gather(F.log_softmax(logits, dim=-1), -1, labels.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    logits = logits.float()
    logp = F.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def sum_pi_squared_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """sum_v softmax(logits)_v^2 = exp(logsumexp(2 logits) - 2 logsumexp(logits)), without the (.., vocab)
    probabilities; logits (..., vocab) -> (...). The collision probability of the token distribution."""
    logits = logits.float()
    return torch.exp(torch.logsumexp(2.0 * logits, dim=-1) - 2.0 * torch.logsumexp(logits, dim=-1))
