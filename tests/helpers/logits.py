"""The logits path of the actor's token math, for tests: log-probs of the labels from log_softmax, and
the entropy plain, chunked and/or recomputed in backward, built from the package's pieces as
engine/forward.py combines them."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from verl_lite.algos.chunked_logprob import checkpointed, entropy_from_logits_chunked


def _entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = F.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def logprob_entropy_from_logits(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    entropy_chunk: int | None = None,
    entropy_checkpointing: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = logits.float()
    logp = torch.gather(F.log_softmax(logits, dim=-1), -1, labels.unsqueeze(-1)).squeeze(-1)
    fn = (lambda x: entropy_from_logits_chunked(x, entropy_chunk)) if entropy_chunk else _entropy
    return logp, checkpointed(fn, logits) if entropy_checkpointing else fn(logits)
