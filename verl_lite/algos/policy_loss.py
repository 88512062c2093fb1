"""Policy-gradient losses with a clipped importance ratio: per token (vanilla), per sequence (gspo) and
the geometric mean of clipped token ratios (geo_mean).

A loss is called by the actor as

    fn(old_log_prob=(bs, T), log_prob=(bs, T), advantages=(bs, T), response_mask=(bs, T), <its keys>)

and returns a dict of (bs, T) tensors: `pg_loss` and the per-token indicators behind verl's metrics
that the loss reports (`clipped` -> actor/pg_clipfrac, `clipped_lower` -> actor/pg_clipfrac_lower,
`approx_kl` -> actor/ppo_kl). The actor aggregates pg_loss with loss_agg_mode (or the mode the spec
fixes) and the mini-batch's LossScale, so accumulation stays exact (loss_agg.py). Keys come from the
spec's config_keys under actor_rollout_ref.actor (registry.py). Other families: policy_loss_pg.py
(gpg, cispo, sapo), policy_loss_cov.py (clip_cov, kl_cov).
"""

from __future__ import annotations

import torch

from verl_lite.algos.registry import POLICY_LOSSES

CLIP_BOUNDS = ("clip_ratio_low", "clip_ratio_high")


@POLICY_LOSSES.register(
    "vanilla",
    config_keys=(*CLIP_BOUNDS, "clip_ratio_c"),
    checks=(("clip_ratio_c", lambda c: c > 1.0, "must be > 1 (the dual-clip cap on the ratio)"),),
)
def compute_policy_loss_vanilla(
    old_log_prob: torch.Tensor,  # (bs, T)
    log_prob: torch.Tensor,  # (bs, T)
    advantages: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor | None = None,  # unused: every term is per token
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
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


@POLICY_LOSSES.register("gspo", config_keys=CLIP_BOUNDS, agg_mode="seq-mean-token-mean")
def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,  # (bs, T)
    log_prob: torch.Tensor,  # (bs, T)
    advantages: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
) -> dict[str, torch.Tensor]:
    """GSPO-token (Zheng et al. 2025): the sequence ratio's value with each token's own gradient.

    s_i     = exp( (1/|y_i|) sum_t m_t (logp_t - old_logp_t) )    geometric mean of the token ratios
    s_{i,t} = sg[s_i] * exp(logp_t - sg[logp_t])                  = s_i in value
    loss    = max(-A s_{i,t}, -A clip(s_{i,t}, 1-low, 1+high))    per token

    pg_loss is always aggregated seq-mean-token-mean (the paper's, and verl's whatever loss_agg_mode
    says), so a sequence's gradient is exactly that of -A_i s_i; with per-token advantages each token
    keeps its own. The ratio moves little, so the paper clips at 3e-4 / 4e-4 (verl's gspo examples set
    clip_ratio_low/high so; the default 0.2 rarely clips). No dual clip: clipped_lower is 0. The log
    ratio is capped at 10 before exp, as in verl. Sequences never straddle micro-batches, so the
    per-token losses are the same under any micro-batch split.
    """
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


@POLICY_LOSSES.register(
    "geo_mean", config_keys=CLIP_BOUNDS, agg_mode="seq-mean-token-mean", is_weights="sequence"
)
def compute_policy_loss_geo_mean(
    old_log_prob: torch.Tensor,  # (bs, T)
    log_prob: torch.Tensor,  # (bs, T)
    advantages: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
) -> dict[str, torch.Tensor]:
    """GMPO (Zhao et al. 2025, arXiv 2507.20673): maximise the geometric mean of clipped token ratios.

    d_t  = logp_t - old_logp_t;  per token the pessimistic side of the clip in log space:
    d'_t = sign(A_t) min(sign(A_t) d_t, sign(A_t) clip(d_t, -low, high))
    loss_i = -Abar_i exp( sum_t m_t d'_t / (|y_i| + 1e-8) ),  Abar_i = sum_t m_t A_t / (|y_i| + 1e-8)

    The sequence loss sits on each of its tokens and is aggregated seq-mean-token-mean, i.e. the mean
    over sequences of loss_i (verl's torch.mean over rows). clipped marks tokens with d_t outside the
    clip range and A > 0, clipped_lower those with A < 0.
    """
    mask = response_mask.to(log_prob.dtype)
    log_ratio = log_prob - old_log_prob  # (bs, T)
    sign = torch.sign(advantages)
    log_ratio_clipped = log_ratio.clamp(-clip_ratio_low, clip_ratio_high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * log_ratio_clipped)  # (bs, T)
    length = mask.sum(-1) + 1e-8  # (bs,)
    seq_ratio = torch.exp((pessimistic * mask).sum(-1) / length)  # (bs,)
    seq_advantage = (advantages * mask).sum(-1) / length  # (bs,)
    seq_loss = -seq_advantage * seq_ratio  # (bs,)
    clipped = (log_ratio != log_ratio_clipped).float()
    return {
        "pg_loss": seq_loss.unsqueeze(-1).expand_as(log_prob),
        "clipped": clipped * (advantages > 0),
        "clipped_lower": clipped * (advantages < 0),
        "approx_kl": -log_ratio.detach(),
    }


POLICY_LOSSES.refuse(
    "bypass_mode",
    "verl's trainer selects this loss itself in rollout correction's bypass mode; use "
    "algorithm.rollout_correction.bypass_mode=True (with loss_mode=vanilla) and its loss_type "
    "(ppo_clip | reinforce) instead",
)
