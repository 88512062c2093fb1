"""The critic's clipped value loss, per token, and the explained-variance metric.

Per token (PPO2's value clipping, as verl and TRL):
    v_clip  = clamp(vpred, v_old - c, v_old + c)
    vf_loss = 0.5 * max((vpred - R)^2, (v_clip - R)^2)
The critic aggregates vf_loss with loss_agg.agg_loss and the mini-batch's LossScale, so accumulation
stays exact; vf_clipped aggregated with token-mean is critic/vf_clipfrac.
"""

from __future__ import annotations

import torch


def compute_value_loss_terms(
    vpreds: torch.Tensor,  # (bs, T) the critic's current predictions
    values: torch.Tensor,  # (bs, T) the critic's predictions at rollout time
    returns: torch.Tensor,  # (bs, T) targets from the advantage estimator
    cliprange_value: float,
) -> dict[str, torch.Tensor]:
    """vf_loss: per-token clipped loss; vf_clipped: 1.0 where the clipped term is the larger one."""
    vpred_clipped = torch.clamp(vpreds, values - cliprange_value, values + cliprange_value)
    loss_unclipped = (vpreds - returns).square()
    loss_clipped = (vpred_clipped - returns).square()
    return {
        "vf_loss": 0.5 * torch.maximum(loss_unclipped, loss_clipped),
        "vf_clipped": (loss_clipped > loss_unclipped).float(),
    }


@torch.no_grad()
def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns) over the valid tokens (critic/vf_explained_var).

    1 is a perfect critic, 0 no better than a constant, negative worse. Unbiased variances and the
    1e-5 in the denominator as in verl's metric, so a constant return gives a finite number.
    """
    valid = mask.bool()
    v, r = values[valid].double(), returns[valid].double()
    if r.numel() < 2:
        return float("nan")
    return float(1.0 - torch.var(r - v) / (torch.var(r) + 1e-5))
