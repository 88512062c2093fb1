"""Covariance-selected policy losses (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs",
arXiv 2505.22617): clip_cov and kl_cov.

Entropy collapses through the tokens where log-prob and advantage covary most. Both losses score each
valid token by cov_t = (A_t - mean A) (logp_t - mean logp), means over the valid tokens at hand, and
treat a small fraction of high-covariance tokens specially: clip_cov cuts their gradient, kl_cov adds
a |log ratio| penalty. As in verl the population is the micro-batch the loss is called on, so which
tokens are picked depends on how a mini-batch is split: these two are the only losses whose update
is not invariant to micro-batch size or world size (their specs say split_invariant=False).
"""

from __future__ import annotations

import torch

from verl_lite.algos.masked import masked_mean
from verl_lite.algos.policy_loss import CLIP_BOUNDS
from verl_lite.algos.registry import POLICY_LOSSES


def _covariance(advantages: torch.Tensor, log_prob: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(bs, T) per-token covariance term over the valid tokens of this batch (no gradient)."""
    logp = log_prob.detach()
    return (advantages - masked_mean(advantages, mask)) * (logp - masked_mean(logp, mask))


@POLICY_LOSSES.register(
    "clip_cov",
    config_keys=(
        *CLIP_BOUNDS,
        "policy_loss.clip_cov_ratio",
        "policy_loss.clip_cov_lb",
        "policy_loss.clip_cov_ub",
    ),
    split_invariant=False,
    checks=(("policy_loss.clip_cov_ratio", lambda r: r > 0, "must be > 0 (fraction of tokens to cut)"),),
)
def compute_policy_loss_clip_cov(
    old_log_prob: torch.Tensor,  # (bs, T)
    log_prob: torch.Tensor,  # (bs, T)
    advantages: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_cov_ratio: float = 0.0002,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
) -> dict[str, torch.Tensor]:
    """Clip-Cov: PPO's clipped loss, with the gradient cut on a few high-covariance tokens.

    Candidates: valid tokens the ratio clip leaves alone with lb < cov_t < ub. k = max(1,
    int(clip_cov_ratio * valid tokens)) of them, drawn at random (torch's global generator) when there
    are more, get loss 0 (detached). loss = max(-A r, -A clip(r, 1-low, 1+high)) elsewhere, r without
    a cap and no dual clip, as in verl. clipped marks the cut tokens (verl's pg_clipfrac for it).
    """
    valid = response_mask > 0
    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    cov = _covariance(advantages, log_prob, response_mask)
    candidates = valid & ~(loss_clipped > loss_unclipped) & (cov > clip_cov_lb) & (cov < clip_cov_ub)
    picked = candidates.nonzero()  # (m, 2)
    num_cut = max(int(clip_cov_ratio * int(valid.sum())), 1)
    if len(picked) > num_cut:
        picked = picked[torch.randperm(len(picked), device=picked.device)[:num_cut]]
    keep = torch.ones_like(ratio)
    keep[picked[:, 0], picked[:, 1]] = 0.0
    return {
        "pg_loss": torch.maximum(loss_unclipped, loss_clipped) * keep,
        "clipped": 1.0 - keep,
        "approx_kl": -log_ratio.detach(),
    }


@POLICY_LOSSES.register(
    "kl_cov",
    config_keys=("policy_loss.kl_cov_ratio", "policy_loss.ppo_kl_coef"),
    split_invariant=False,
    checks=(("policy_loss.kl_cov_ratio", lambda r: r > 0, "must be > 0 (fraction of tokens to penalise)"),),
)
def compute_policy_loss_kl_cov(
    old_log_prob: torch.Tensor,  # (bs, T)
    log_prob: torch.Tensor,  # (bs, T)
    advantages: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    kl_cov_ratio: float = 0.0002,
    ppo_kl_coef: float = 0.1,
) -> dict[str, torch.Tensor]:
    """KL-Cov: the unclipped surrogate -A r, plus ppo_kl_coef |log r| on the top-k covariance tokens.

    k = max(1, int(kl_cov_ratio * valid tokens)) tokens with the largest cov_t get the penalty; no
    clipping anywhere, as in verl. approx_kl is |log r| (verl's actor/ppo_kl for kl_cov).
    """
    valid = response_mask > 0
    log_ratio = log_prob - old_log_prob
    abs_log_ratio = log_ratio.abs()
    loss = -advantages * torch.exp(log_ratio)
    num_valid = int(valid.sum())
    if num_valid:
        cov = _covariance(advantages, log_prob, response_mask)[valid]  # (num_valid,) row-major
        top = torch.topk(cov, max(1, int(num_valid * kl_cov_ratio))).indices
        chosen = torch.zeros(num_valid, dtype=torch.bool, device=cov.device)
        chosen[top] = True
        penalised = torch.zeros_like(valid)
        penalised[valid] = chosen
        loss = torch.where(penalised, loss + ppo_kl_coef * abs_log_ratio, loss)
    return {"pg_loss": loss, "approx_kl": abs_log_ratio.detach()}
