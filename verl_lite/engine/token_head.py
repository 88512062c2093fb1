"""The LM head that can answer with per-token log-probs and entropy instead of logits
(`model.use_fused_kernels`).

The head must run inside the model's own forward: under FSDP2 the root unit (embeddings, final norm,
head) is gathered only during the root module's forward, and its gradient is reduced by the root's
backward hooks. So the model keeps its structure and its parameter names (`lm_head.weight`, tied or
not), and only the head module's class changes (`apply_token_head`, before fully_shard): a
`TokenHead` is an `nn.Linear` whose forward, while a `token_request` is active, computes
algos/chunked_logprob.py's `linear_logprob_entropy` from the hidden states it is given and returns a
(rows, L, 2) tensor, [log-prob of the label, entropy] (entropy zeros unless asked), with a third
channel sum_v pi_v^2 when asked (no gradient), in place of the (rows, L, vocab) logits. The
model returns that as `output.logits`; outside a request it is the plain linear layer (HF generate,
the rollout's weight sync, a checkpoint save see the same module and names).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from verl_lite.algos.chunked_logprob import linear_logprob_entropy, linear_sum_pi_squared


@dataclass
class _Request:
    labels: torch.Tensor  # (rows, L): the token each position's log-prob is of
    temperature: float
    entropy: bool
    sum_pi_squared: bool = False


class TokenHead(nn.Linear):
    """nn.Linear (same parameters and state dict) that, under `token_request`, gives token stats."""

    request: _Request | None = None

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        r = self.request
        if r is None:
            return super().forward(hidden)
        if self.bias is not None:
            raise ValueError("use_fused_kernels needs an LM head without bias")
        logp, entropy = linear_logprob_entropy(
            hidden, self.weight, r.labels, temperature=r.temperature, with_entropy=r.entropy
        )
        stats = [logp, entropy]
        if r.sum_pi_squared:
            stats.append(linear_sum_pi_squared(hidden, self.weight, temperature=r.temperature))
        return torch.stack(stats, dim=-1)  # (rows, L, 2 or 3)


def apply_token_head(model: nn.Module) -> TokenHead:
    """Make `model`'s output embedding a TokenHead in place (before fully_shard); returns it."""
    head = model.get_output_embeddings()
    if not isinstance(head, nn.Linear):
        raise ValueError(f"use_fused_kernels needs a linear LM head; {type(model).__name__} has {type(head)}")
    if not isinstance(head, TokenHead):
        head.__class__ = TokenHead  # same object, parameters, hooks and state-dict names
    return head


@contextmanager
def token_request(
    head: TokenHead, labels: torch.Tensor, temperature: float, entropy: bool, sum_pi_squared: bool = False
):
    """While active, the model's `logits` are (rows, L, 2): log-prob of `labels` and entropy, and a
    third channel, sum_v pi_v^2, with `sum_pi_squared`."""
    head.request = _Request(labels, temperature, entropy, sum_pi_squared)
    try:
        yield
    finally:
        head.request = None
