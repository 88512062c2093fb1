"""What verl's sampling settings mean, worked out independently of both rollout backends, and the
checks that hold a backend to it.

`reference_probs` is the distribution a rollout must sample from, given the actor's logits:
softmax(logits / temperature), then top_k (<= 0: off) keeps the k most likely tokens, then top_p
(1.0: off) keeps the smallest set of most likely tokens whose mass reaches top_p, renormalised
(vLLM's order and rule). Both checks can fail: a backend that truncates where the config does not
(transformers' top_k=50 default), or reports log-probs of another distribution than it samples
from, misses them by far more than their tolerances.
"""

from __future__ import annotations

import torch

# (temperature, top_k, top_p): verl's defaults first (no truncation at all), then each warper alone
# and together
SAMPLING_CASES = (
    (1.0, -1, 1.0),
    (0.7, 5, 1.0),
    (1.3, -1, 0.6),
    (1.0, 20, 0.8),
)


def reference_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """(..., V) sampling probabilities, in float64."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    if top_k > 0:
        kth = probs.topk(top_k, dim=-1).values[..., -1:]
        probs = torch.where(probs >= kth, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs  # mass of the more likely tokens
        keep_sorted = mass_before < top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = torch.where(keep, probs, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def assert_log_probs_match(
    actor_logits: torch.Tensor,  # (rows, R, V) the actor's logits scoring each response token
    tokens: torch.Tensor,  # (rows, R) sampled tokens
    rollout_log_probs: torch.Tensor,  # (rows, R) the backend's log-probs of them
    case: tuple[float, int, float],
    atol: float = 1e-4,
) -> None:
    """Every sampled token lies in the configured support, and the backend's log-prob of it is the
    reference distribution's."""
    probs = reference_probs(actor_logits, *case)
    expected = probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    assert (expected > 0).all(), f"{case}: a token outside the configured support was sampled"
    diff = (expected.log() - rollout_log_probs.double()).abs().max().item()
    assert diff < atol, f"{case}: rollout log-probs differ from the reference distribution's by {diff}"


def total_variation(samples: torch.Tensor, probs: torch.Tensor) -> float:
    """Total-variation distance between the empirical distribution of `samples` and `probs` (V,)."""
    counts = torch.bincount(samples.flatten(), minlength=probs.shape[-1]).double()
    return 0.5 * (counts / counts.sum() - probs.double()).abs().sum().item()


def mass_outside_top(probs: torch.Tensor, k: int) -> float:
    """Probability mass a top-k truncation would cut from `probs` (V,)."""
    return 1.0 - probs.topk(k).values.sum().item()
