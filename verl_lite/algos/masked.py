"""Masked reductions shared by the losses and the metrics, and where a response's tokens are.

A response row holds real tokens up to its length (attention_mask's response columns), the
policy's own tokens among them marked by response_mask. The two agree for a single-turn response;
a multi-turn one also holds inserted tokens (tool results, user turns: real, mask 0).
"""

from __future__ import annotations

import torch


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    values = values * mask
    return values.sum() if dim is None else values.sum(dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    count = mask.sum() if dim is None else mask.sum(dim)
    return masked_sum(values, mask, dim) / count.clamp(min=1)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        n = mask.sum()
        var = var * n / (n - 1).clamp(min=1)
    return var


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    return whitened if shift_mean else whitened + mean


def response_lengths(attention_mask: torch.Tensor, response_width: int) -> torch.Tensor:
    """(bs,) real tokens of each response: model and inserted ones (verl's response length)."""
    return attention_mask[:, -response_width:].sum(-1)


def last_policy_token(response_mask: torch.Tensor) -> torch.Tensor:
    """(bs,) index of each response's last token the policy sampled (0 for a row with none): where a
    sequence-level reward goes, so estimators that skip masked tokens still see it."""
    positions = torch.arange(response_mask.shape[-1], device=response_mask.device)
    return (positions * response_mask.long()).argmax(-1)
