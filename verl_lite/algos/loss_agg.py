"""Loss aggregation that stays exact under gradient accumulation.

A mini-batch is split over data-parallel ranks and, on each rank, into micro-batches. If every
micro-batch divided by its *own* token or sequence count, the accumulated gradient would weight
tokens differently depending on the split. Instead each micro-batch divides by the count over the
whole mini-batch on all ranks (`LossScale`), so the micro-batch losses are additive shares: their
sum over micro-batches and ranks is exactly the full-batch loss, and so is the sum of gradients.

Modes (verl's names), for token losses l[i, t] with mask m[i, t] over N sequences:
  token-mean               sum_it l*m / sum_it m
  token-sum                sum_it l*m: every valid token of the mini-batch (on all ranks) counts once,
                           unnormalised (verl's core_algos `token-sum`: the global token sum)
  seq-mean-token-sum       (1/N) sum_i sum_t l*m
  seq-mean-token-mean      (1/N) sum_i (sum_t l*m / sum_t m)
  seq-mean-token-sum-norm  (1/N) sum_i sum_t l*m / L   with L the configured response length (Dr.GRPO),
                           not the micro-batch's tensor width, which varies with dynamic batching.
N counts sequences with at least one valid token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from verl_lite.config.schema_actor import LOSS_AGG_MODES


@dataclass(frozen=True)
class LossScale:
    """Counts over a whole mini-batch (all micro-batches, all ranks)."""

    num_tokens: float
    num_seqs: float
    response_length: int

    @classmethod
    def of(cls, mask: torch.Tensor, response_length: int | None = None) -> LossScale:
        """The counts of one batch taken as the whole mini-batch."""
        return cls(
            num_tokens=float(mask.sum()),
            num_seqs=float((mask.sum(-1) > 0).sum()),
            response_length=int(response_length or mask.shape[-1]),
        )


def agg_loss(
    loss_mat: torch.Tensor, mask: torch.Tensor, mode: str, scale: LossScale | None = None
) -> torch.Tensor:
    """This batch's share of the mini-batch loss under `mode`.

    loss_mat, mask: (batch, response_len). With `scale=None` the batch is the whole mini-batch.
    """
    if scale is None:
        scale = LossScale.of(mask)
    mask = mask.to(loss_mat.dtype)
    masked = loss_mat * mask
    if mode == "token-mean":
        return masked.sum() / max(scale.num_tokens, 1.0)
    if mode == "token-sum":  # no denominator: a micro-batch's share is its own sum
        return masked.sum()
    if mode == "seq-mean-token-sum":
        return masked.sum() / max(scale.num_seqs, 1.0)
    if mode == "seq-mean-token-mean":
        seq_tokens = mask.sum(-1)
        per_seq = masked.sum(-1) / seq_tokens.clamp(min=1)
        return per_seq.sum() / max(scale.num_seqs, 1.0)
    if mode == "seq-mean-token-sum-norm":
        return masked.sum() / (max(scale.num_seqs, 1.0) * scale.response_length)
    raise ValueError(f"actor_rollout_ref.actor.loss_agg_mode={mode!r} is not one of {LOSS_AGG_MODES}")
