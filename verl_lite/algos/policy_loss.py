"""Policy-gradient losses, per token, so aggregation (loss_agg.py) can stay exact.

A loss returns a dict of (batch, response_len) tensors: `pg_loss` and the per-token indicators the
metrics need (`clipped`, `clipped_lower`, `approx_kl`); the caller aggregates them.
"""

from __future__ import annotations

import torch

from verl_lite.algos.registry import POLICY_LOSSES


@POLICY_LOSSES.register("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob: torch.Tensor,  # (bs, T)
    log_prob: torch.Tensor,  # (bs, T)
    advantages: torch.Tensor,  # (bs, T)
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    **_unused,
) -> dict[str, torch.Tensor]:
    """PPO's clipped surrogate with dual clip (Ye et al. 2020) for negative advantages.

    ratio = exp(logp - old_logp);  loss = max(-A r, -A clip(r, 1-low, 1+high)),
    and for A < 0 the loss is further capped at -A c (c = clip_ratio_c > 1).
    """
    log_ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    loss_max = torch.maximum(loss_unclipped, loss_clipped)
    loss_dual = torch.minimum(loss_max, -advantages * clip_ratio_c)
    negative = advantages < 0
    return {
        "pg_loss": torch.where(negative, loss_dual, loss_max),
        "clipped": (loss_clipped > loss_unclipped).float(),
        "clipped_lower": ((loss_max > -advantages * clip_ratio_c) & negative).float(),
        "approx_kl": -log_ratio,
    }
