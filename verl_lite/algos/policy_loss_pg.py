"""Policy losses without PPO's hard clip on the objective: gpg (plain policy gradient), cispo (a clipped,
stop-gradient importance weight on the log-prob) and sapo (a soft sigmoid gate on the ratio).

Same calling convention and returned terms as policy_loss.py; the formulas are verl's.
"""

from __future__ import annotations

import torch

from verl_lite.algos.policy_loss import CLIP_BOUNDS
from verl_lite.algos.registry import POLICY_LOSSES


def _log_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> torch.Tensor:
    return (log_prob - old_log_prob).clamp(-20.0, 20.0)  # as in verl, so exp never overflows


@POLICY_LOSSES.register("gpg")
def compute_policy_loss_gpg(
    old_log_prob: torch.Tensor,  # (bs, T) unused: no importance ratio
    log_prob: torch.Tensor,  # (bs, T)
    advantages: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor | None = None,  # unused: per token
) -> dict[str, torch.Tensor]:
    """GPG (Chu et al. 2025): loss = -A logp, REINFORCE on the current policy's samples.

    No ratio and no clip, so verl reports no clip fraction or ppo_kl for it and neither does this. Meant
    for one update per batch (ppo_epochs=1, one mini-batch), where old and current policy coincide.
    """
    return {"pg_loss": -log_prob * advantages}


@POLICY_LOSSES.register("cispo", config_keys=CLIP_BOUNDS)
def compute_policy_loss_cispo(
    old_log_prob: torch.Tensor,  # (bs, T)
    log_prob: torch.Tensor,  # (bs, T)
    advantages: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor | None = None,  # unused: per token
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
) -> dict[str, torch.Tensor]:
    """CISPO (MiniMax-M1, arXiv 2506.13585): loss = -sg[clip(r, 1-low, 1+high)] A logp.

    The importance weight is clipped and carries no gradient, so every token keeps a gradient (PPO
    zeroes clipped ones), scaled by the bounded weight. The loss value includes logp itself, so
    actor/pg_loss is not comparable with vanilla's. clipped marks r outside the range; clipped_lower
    is 0 as in verl.
    """
    log_ratio = _log_ratio(log_prob, old_log_prob)
    ratio = torch.exp(log_ratio)
    weight = ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    return {
        "pg_loss": -weight.detach() * advantages * log_prob,
        "clipped": (ratio != weight).float(),
        "clipped_lower": torch.zeros_like(ratio),
        "approx_kl": -log_ratio.detach(),
    }


@POLICY_LOSSES.register(
    "sapo",
    config_keys=("tau_pos", "tau_neg"),
    agg_mode="seq-mean-token-mean",
    checks=(
        ("tau_pos", lambda t: t > 0, "must be > 0 (SAPO's gate temperature for A > 0)"),
        ("tau_neg", lambda t: t > 0, "must be > 0 (SAPO's gate temperature for A <= 0)"),
    ),
)
def compute_policy_loss_sapo(
    old_log_prob: torch.Tensor,  # (bs, T)
    log_prob: torch.Tensor,  # (bs, T)
    advantages: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor | None = None,  # unused: per token
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> dict[str, torch.Tensor]:
    """SAPO (arXiv 2511.20347): a smooth gate instead of a hard clip.

    f(r) = sigmoid(tau (r - 1)) * 4 / tau with tau = tau_pos where A > 0, tau_neg elsewhere;
    loss = -f(r) A. At r = 1 the gate's slope is 1 (PPO's gradient on policy) and it fades as r moves
    away, faster for larger tau. pg_loss is aggregated seq-mean-token-mean, as verl fixes it; no hard
    clip, so the clip fractions are 0.
    """
    log_ratio = _log_ratio(log_prob, old_log_prob)
    ratio = torch.exp(log_ratio)
    tau = torch.where(advantages > 0, tau_pos, tau_neg).to(ratio.dtype)
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    zeros = torch.zeros_like(ratio)
    return {
        "pg_loss": -gate * advantages,
        "clipped": zeros,
        "clipped_lower": zeros,
        "approx_kl": -log_ratio.detach(),
    }
