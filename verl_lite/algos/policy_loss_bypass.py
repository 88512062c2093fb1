"""The loss of rollout correction's bypass mode (`algorithm.rollout_correction.bypass_mode=True`):
verl's compute_policy_loss_bypass_mode, with the rollout's log-probs standing in for the old policy's.

No old-log-prob pass runs: the rollout's own log-probs are the anchor (two policies, not three). In
every micro-batch, from the current policy's log-probs, the rollout correction (rollout_corr.py) is
computed without gradient -- IS weights pi_theta / pi_rollout, truncated, and the rejection mask --
and the loss is, by `loss_type`:

  ppo_clip   vanilla's clipped surrogate with ratio pi_theta / pi_rollout, over the tokens rejection
             keeps; no IS weights (the ratio already is the importance ratio: weighting it again
             would count it twice)
  reinforce  -A * w * log pi_theta over the kept tokens (w: the IS weights, 1 without rollout_is);
             its ppo_kl is the mean of log pi_rollout - log pi_theta

The loss is aggregated over the kept tokens but normalised by the mini-batch's counts before
rejection, as verl's (its global token count comes from the mask the trainer sent).
"""

from __future__ import annotations

import torch

from verl_lite.algos.policy_loss import compute_policy_loss_vanilla
from verl_lite.algos.rollout_corr import compute_rollout_correction


def compute_bypass_terms(
    log_prob: torch.Tensor,  # (bs, T) the current policy's
    rollout_log_prob: torch.Tensor,  # (bs, T) the rollout's (the batch's old_log_probs in bypass mode)
    advantages: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    cfg,  # algorithm.rollout_correction
    clip: dict,  # vanilla's clip_ratio_low, clip_ratio_high, clip_ratio_c
    mean_over=None,  # rollout_is_batch_normalize's mean over ranks
) -> tuple[dict[str, torch.Tensor], torch.Tensor, dict[str, float]]:
    """(per-token loss terms as a policy loss returns them, the mask the loss aggregates over, the
    rollout_corr/ metrics of this micro-batch)."""
    weights, kept, metrics = compute_rollout_correction(
        log_prob.detach(), rollout_log_prob, response_mask, cfg, mean_over
    )
    kept = kept.to(log_prob.dtype)
    if cfg.loss_type == "reinforce":
        pg = -advantages * log_prob
        terms = {
            "pg_loss": pg * weights if weights is not None else pg,
            "approx_kl": (rollout_log_prob - log_prob).detach(),
        }
    elif cfg.loss_type == "ppo_clip":
        terms = compute_policy_loss_vanilla(rollout_log_prob, log_prob, advantages, kept, **clip)
    else:
        raise ValueError(
            f"algorithm.rollout_correction.loss_type={cfg.loss_type!r}: use ppo_clip or reinforce"
        )
    return terms, kept, metrics
