"""Policy losses that bound the step by a divergence on the token's probability instead of PPO's ratio
clip: dppo_tv and dppo_kl (DPPO, arXiv 2602.04879), and dro (a quadratic penalty on the log-ratio).

Same calling convention and returned terms as policy_loss.py; the formulas are verl 0.9.1's
(core_algos.compute_policy_loss_dppo_tv, _dppo_kl, _dro).

DPPO keeps a token's gradient only while the policy has not moved too far on it, measured on the
probability itself (p = exp(logp), p_old = exp(old_logp)); clip_ratio_low / clip_ratio_high are the
divergence thresholds here (not ratio bounds), and clip_ratio_c truncates the importance weight:

    dppo_tv  valid = p - p_old <= high       where A > 0,   p - p_old >= -low   elsewhere
    dppo_kl  KL_bin = p_old log(p_old / p) + (1 - p_old) log((1 - p_old + 1e-8) / (1 - p + 1e-8))
             valid = KL_bin <= high or p <= p_old   where A > 0,
                     KL_bin <= low  or p >= p_old   elsewhere
    loss = -A sg[min(r, clip_ratio_c)] logp valid,   r = exp(clamp(logp - old_logp, -20, 20))

`clipped` marks the tokens outside the valid set (actor/pg_clipfrac), `clipped_lower` the valid ones
whose weight was truncated (actor/pg_clipfrac_lower), as verl reports them. The loss value includes
logp itself, so actor/pg_loss is not comparable with vanilla's.

    dro      loss = -(logp A - beta / 2 (logp - old_logp)^2),  beta = policy_loss.dro_beta > 0

DRO has no clip: only actor/ppo_kl is reported.
"""

from __future__ import annotations

import torch

from verl_lite.algos.policy_loss import CLIP_BOUNDS
from verl_lite.algos.registry import POLICY_LOSSES

DPPO = dict(
    config_keys=(*CLIP_BOUNDS, "clip_ratio_c"),
    checks=(("clip_ratio_c", lambda c: c > 0, "must be > 0 (DPPO's cap on the importance weight)"),),
)


def _tv_valid(old_log_prob, log_prob, low, high):
    """DPPO-Binary-TV's (valid where A > 0, valid elsewhere): the total variation p - p_old."""
    moved = torch.exp(log_prob) - torch.exp(old_log_prob)
    return moved <= high, moved >= -low


def _kl_valid(old_log_prob, log_prob, low, high):
    """DPPO-Binary-KL's: the KL of the token's two-outcome distribution, in the advantage's direction."""
    prob, old_prob = torch.exp(log_prob), torch.exp(old_log_prob)
    binary_kl = old_prob * (old_log_prob - log_prob) + (1 - old_prob) * torch.log(
        (1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8)
    )
    return (binary_kl <= high) | (prob <= old_prob), (binary_kl <= low) | (prob >= old_prob)


def _dppo_loss(valid_set):
    """The DPPO loss whose valid tokens `valid_set` decides (module docstring)."""

    def loss(
        old_log_prob: torch.Tensor,  # (bs, T)
        log_prob: torch.Tensor,  # (bs, T)
        advantages: torch.Tensor,  # (bs, T)
        response_mask: torch.Tensor | None = None,  # unused: per token
        clip_ratio_low: float = 0.2,
        clip_ratio_high: float = 0.2,
        clip_ratio_c: float = 3.0,
    ) -> dict[str, torch.Tensor]:
        valid_up, valid_down = valid_set(old_log_prob, log_prob, clip_ratio_low, clip_ratio_high)
        log_ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0)
        ratio = torch.exp(log_ratio)
        weight = ratio.clamp(max=clip_ratio_c).detach()
        valid = torch.where(advantages > 0, valid_up, valid_down).detach().float()
        return {
            "pg_loss": -advantages * weight * log_prob * valid,
            "clipped": 1.0 - valid,
            "clipped_lower": (ratio > clip_ratio_c).float() * valid,
            "approx_kl": -log_ratio.detach(),
        }

    loss.__doc__ = valid_set.__doc__
    return loss


compute_policy_loss_dppo_tv = POLICY_LOSSES.register("dppo_tv", **DPPO)(_dppo_loss(_tv_valid))
compute_policy_loss_dppo_kl = POLICY_LOSSES.register("dppo_kl", **DPPO)(_dppo_loss(_kl_valid))


@POLICY_LOSSES.register(
    "dro",
    config_keys=("policy_loss.dro_beta",),
    checks=(
        (
            "policy_loss.dro_beta",
            lambda b: b is not None and b > 0,
            "must be set > 0 (DRO's weight of the squared log-ratio)",
        ),
    ),
)
def compute_policy_loss_dro(
    old_log_prob: torch.Tensor,  # (bs, T)
    log_prob: torch.Tensor,  # (bs, T)
    advantages: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor | None = None,  # unused: per token
    dro_beta: float | None = None,
) -> dict[str, torch.Tensor]:
    """DRO: the policy gradient with a quadratic penalty on the log-ratio (module docstring)."""
    if dro_beta is None or dro_beta <= 0:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.dro_beta={dro_beta} must be > 0 for DRO")
    log_ratio = log_prob - old_log_prob
    return {
        "pg_loss": -(log_prob * advantages - 0.5 * dro_beta * log_ratio.square()),
        "approx_kl": -log_ratio.detach(),
    }
