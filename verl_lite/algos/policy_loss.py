"""Policy-gradient losses, per token, so aggregation (loss_agg.py) can stay exact.

A loss returns a dict of (batch, response_len) tensors: `pg_loss` and the per-token indicators the
metrics need (`clipped`, `clipped_lower`, `approx_kl`); the caller aggregates them with the configured
loss_agg_mode and the mini-batch's LossScale. Every loss accepts the same keywords (old_log_prob,
log_prob, advantages, response_mask, clip_ratio_low, clip_ratio_high, clip_ratio_c) and ignores the
ones it does not use.
"""

from __future__ import annotations

import torch

from verl_lite.algos.registry import POLICY_LOSSES

# The GSPO paper's clip ranges (Zheng et al. 2025, sec. 5.1), which verl's gspo examples set: the
# sequence ratio is a geometric mean, so it moves far less than a token ratio.
GSPO_CLIP_RATIO_LOW = 3e-4
GSPO_CLIP_RATIO_HIGH = 4e-4


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
    """PPO's clipped surrogate, clip-higher bounds, and dual clip (Ye et al. 2020) for A < 0.

    ratio r = exp(logp - old_logp);  loss = max(-A r, -A clip(r, 1-low, 1+high)),
    and for A < 0 the loss is further capped at -A c (c = clip_ratio_c > 1): a token whose ratio has
    grown far past 1 on a bad action gets a bounded, gradient-free loss instead of an unbounded one.
    `clipped_lower` marks the tokens where that cap is active (verl's pg_clipfrac_lower).
    """
    if clip_ratio_c <= 1.0:
        raise ValueError(
            f"actor_rollout_ref.actor.clip_ratio_c={clip_ratio_c} must be > 1 (dual-clip cap on the ratio)"
        )
    log_ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    loss_max = torch.maximum(loss_unclipped, loss_clipped)
    loss_cap = -advantages * clip_ratio_c
    negative = advantages < 0
    return {
        "pg_loss": torch.where(negative, torch.minimum(loss_max, loss_cap), loss_max),
        "clipped": (loss_clipped > loss_unclipped).float(),
        "clipped_lower": ((loss_max > loss_cap) & negative).float(),
        "approx_kl": -log_ratio,
    }


@POLICY_LOSSES.register("gspo")
def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,  # (bs, T)
    log_prob: torch.Tensor,  # (bs, T)
    advantages: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor | None = None,  # (bs, T)
    clip_ratio_low: float = GSPO_CLIP_RATIO_LOW,
    clip_ratio_high: float = GSPO_CLIP_RATIO_HIGH,
    **_unused,
) -> dict[str, torch.Tensor]:
    """GSPO-token (Zheng et al. 2025): the sequence ratio's value with each token's own gradient.

    s_i     = exp( (1/|y_i|) sum_t m_t (logp_t - old_logp_t) )    geometric mean of the token ratios
    s_{i,t} = sg[s_i] * exp(logp_t - sg[logp_t])                  = s_i in value
    loss    = max(-A s_{i,t}, -A clip(s_{i,t}, 1-low, 1+high))    per token

    With loss_agg_mode=seq-mean-token-mean (the paper's), the gradient of a sequence is exactly that of
    -A_i s_i; with per-token advantages, each token keeps its own. No dual clip: clipped_lower is 0.
    The log ratio is capped at 10 before exp, as in verl. Sequences never straddle micro-batches, so the
    per-token losses are the same under any micro-batch split.
    """
    if response_mask is None:
        raise ValueError(
            "policy_loss.loss_mode=gspo needs response_mask (the sequence ratio averages over it)"
        )
    mask = response_mask.to(log_prob.dtype)
    log_ratio = log_prob - old_log_prob  # (bs, T)
    seq_log_ratio = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # (bs,)
    token_log_ratio = seq_log_ratio.detach().unsqueeze(-1) + log_prob - log_prob.detach()  # (bs, T)
    ratio = torch.exp(token_log_ratio.clamp(max=10.0))
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    return {
        "pg_loss": torch.maximum(loss_unclipped, loss_clipped),
        "clipped": (loss_clipped > loss_unclipped).float(),
        "clipped_lower": torch.zeros_like(loss_unclipped),
        "approx_kl": -log_ratio.detach(),
    }
