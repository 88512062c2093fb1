"""Rollout correction (`algorithm.rollout_correction.*`, verl's keys and metrics): importance weights and
rejection between the policy that sampled (the rollout: vLLM in bf16) and the one that trains (the
actor's fp32 recomputation).

With r_t = pi_train(y_t) / pi_rollout(y_t), computed as exp(log_ratio) and bounded to exp(+-20):

  rollout_is=token      w_t = min(r_t, threshold)                 truncated IS (TIS), per token
  rollout_is=sequence   w_t = min(prod_s r_s, threshold)           one weight per sequence, broadcast
  rollout_is_batch_normalize   w / mean(w): over tokens (token) or over sequences (sequence)
  rollout_rs            drop tokens or sequences whose divergence leaves bounds (rollout_rs.py):
                        masked IS (MIS) when combined with rollout_is, geometric RS (seq_mean_k1), ...

Weights are zero on padding and carry no gradient; rejection changes the response mask (rejected
tokens leave every loss and the advantage). verl computes the same in decoupled mode (bypass_mode=False)
once per batch on the driver, from the recomputed old log-probs (`compute_rollout_correction`), and
in bypass mode per micro-batch inside the loss, from the current policy (workers/actor.py). Metrics,
all under `rollout_corr/`: the weights' statistics (`rollout_is_*`), the rejection's
(`rollout_rs_*`), and the off-policy diagnostics (`offpolicy_metrics`: kl, k3_kl, perplexities, chi2).
The formulas are verl's (verl/trainer/ppo/rollout_corr_helper.py at b178a3c), written out here.
"""

from __future__ import annotations

import math

import torch

from verl_lite.algos.masked import masked_mean
from verl_lite.algos.rollout_rs import SAFETY_BOUND, rejection_mask

IS_LEVELS = ("token", "sequence")
PREFIX = "rollout_corr/"


def is_problems(level, threshold) -> list[str]:
    """What is wrong with rollout_is / rollout_is_threshold ([] when the weights are off)."""
    key = "algorithm.rollout_correction"
    if level is None:
        return []
    if level not in IS_LEVELS:
        return [f"{key}.rollout_is={level!r} is not one of {list(IS_LEVELS)} (or null: no weights)"]
    if (
        not isinstance(threshold, (int, float))
        or isinstance(threshold, bool)
        or not math.isfinite(threshold)  # nan passes `<= 0` and truncates every weight to nan
        or threshold <= 0
    ):
        return [f"{key}.rollout_is_threshold={threshold!r} must be a finite positive number (the truncation)"]
    return []


def _seq_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum(-1)


def _seq_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _seq_sum(values, mask) / (mask.sum(-1) + 1e-8)


def is_weights(
    log_ratio: torch.Tensor,  # (bs, T) log pi_train - log pi_rollout
    mask: torch.Tensor,  # (bs, T)
    level: str,
    threshold: float,
    batch_normalize: bool = False,
    mean_over=None,  # (sum, count) -> global sum / count: a batch split over ranks (bypass mode)
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance weights (bs, T), 0 on padding and detached, and their metrics."""
    mask = mask.to(log_ratio.dtype)
    if level == "token":
        log_w = log_ratio
        weights = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    else:
        log_w = _seq_sum(log_ratio, mask).unsqueeze(-1)  # (bs, 1)
        weights = torch.exp(log_w.clamp(-SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)
    weights = weights * mask
    metrics = is_metrics(weights, log_w, mask, level, threshold)  # before truncation
    weights = weights.clamp(max=threshold).detach()
    if batch_normalize:
        if level == "token":
            total, count = (weights * mask).sum(), mask.sum()
        else:
            seqs = (mask.sum(-1) > 0).to(weights.dtype)
            total, count = (_seq_mean(weights, mask) * seqs).sum(), seqs.sum()
        mean = mean_over(total, count) if mean_over else total / count.clamp(min=1e-8)
        if mean > 1e-8:
            weights = weights / mean
            metrics["rollout_is_batch_norm_factor"] = float(mean)
        else:
            metrics["rollout_is_batch_norm_factor"] = 1.0
    return weights, metrics


def is_metrics(
    weights: torch.Tensor, log_w: torch.Tensor, mask: torch.Tensor, level: str, threshold: float
) -> dict[str, float]:
    """verl's compute_is_metrics: statistics of the untruncated weights (`log_w`: per token, or per
    sequence (bs, 1))."""
    lower = 1.0 / threshold
    valid = mask.bool()
    out = {"rollout_is_mean": float(masked_mean(weights, mask))}
    if level == "sequence":
        out["rollout_is_max"] = math.exp(min(float(log_w.max()), SAFETY_BOUND))
        out["rollout_is_min"] = math.exp(float(log_w.min()))
        out["rollout_is_ratio_fraction_high"] = float((log_w > math.log(threshold)).float().mean())
        out["rollout_is_ratio_fraction_low"] = float((log_w < math.log(lower)).float().mean())
    else:
        out["rollout_is_ratio_fraction_high"] = float(masked_mean((weights > threshold).float(), mask))
        out["rollout_is_ratio_fraction_low"] = float(masked_mean((weights < lower).float(), mask))
        out["rollout_is_max"] = float(weights.masked_fill(~valid, float("-inf")).max())
        out["rollout_is_min"] = float(weights.masked_fill(~valid, float("inf")).min())
    clamped = weights.clamp(min=lower, max=threshold)
    if mask.sum() > 1:
        mean = masked_mean(clamped, mask)
        out["rollout_is_std"] = float(
            torch.sqrt((masked_mean(clamped.square(), mask) - mean.square()).clamp(min=0))
        )
    else:
        out["rollout_is_std"] = 0.0
    normalized = clamped / (masked_mean(clamped, mask) + 1e-8)
    out["rollout_is_eff_sample_size"] = 1.0 / float(masked_mean(normalized.square(), mask))
    seq = _seq_mean(weights, mask)  # every row, as verl's (a row without tokens counts as 0)
    out["rollout_is_seq_mean"] = float(seq.mean())
    out["rollout_is_seq_std"] = float(seq.std()) if seq.numel() > 1 else 0.0
    out["rollout_is_seq_max"], out["rollout_is_seq_min"] = float(seq.max()), float(seq.min())
    out["rollout_is_seq_max_deviation"] = float((seq - 1.0).abs().max())
    out["rollout_is_seq_fraction_high"] = float((seq > threshold).float().mean())
    out["rollout_is_seq_fraction_low"] = float((seq < lower).float().mean())
    return out


def offpolicy_metrics(train_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> dict:
    """verl's compute_offpolicy_metrics: how far the training policy is from the rollout's."""
    mask = mask.to(train_logp.dtype)
    train_mean = _seq_mean(train_logp, mask)  # (bs,) mean log-prob per sequence
    rollout_mean = _seq_mean(rollout_logp, mask)
    log_ratio = train_logp - rollout_logp
    log_ppl_diff = rollout_mean - train_mean
    rho = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    seq_log = _seq_sum(log_ratio, mask).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    return {
        "training_ppl": float(torch.exp(-train_mean).mean()),
        "training_log_ppl": float((-train_mean).mean()),
        "kl": float(masked_mean(rollout_logp - train_logp, mask)),
        "k3_kl": float(masked_mean(torch.exp(log_ratio) - log_ratio - 1, mask)),
        "rollout_ppl": float(torch.exp(-rollout_mean).mean()),
        "rollout_log_ppl": float((-rollout_mean).mean()),
        "log_ppl_diff": float(log_ppl_diff.mean()),
        "log_ppl_abs_diff": float(log_ppl_diff.abs().mean()),
        "log_ppl_diff_max": float(log_ppl_diff.max()),
        "log_ppl_diff_min": float(log_ppl_diff.min()),
        "ppl_ratio": float(torch.exp(log_ppl_diff).mean()),
        "chi2_token": float(masked_mean(rho.square(), mask) - 1.0),
        "chi2_seq": float(torch.exp(2.0 * seq_log).mean() - 1.0),
    }


def prefixed(metrics: dict[str, float]) -> dict[str, float]:
    return {PREFIX + k: v for k, v in metrics.items()}


@torch.no_grad()
def compute_rollout_correction(
    train_logp: torch.Tensor,  # (bs, T) old log-probs (decoupled) or the current policy's (bypass)
    rollout_logp: torch.Tensor,  # (bs, T)
    mask: torch.Tensor,  # (bs, T) response mask
    cfg,  # algorithm.rollout_correction
    mean_over=None,
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    """(IS weights or None when rollout_is is null, the response mask after rejection, metrics under
    rollout_corr/): verl's compute_rollout_correction_and_rejection_mask."""
    if not mask.any():
        raise ValueError("rollout correction needs at least one response token in the batch")
    log_ratio = train_logp - rollout_logp
    metrics, weights = {}, None
    if cfg.rollout_is is not None:
        weights, m = is_weights(
            log_ratio,
            mask,
            cfg.rollout_is,
            cfg.rollout_is_threshold,
            cfg.rollout_is_batch_normalize,
            mean_over,
        )
        metrics.update(m)
    kept = mask
    if cfg.rollout_rs is not None:
        kept, m = rejection_mask(log_ratio, mask, cfg.rollout_rs, cfg.rollout_rs_threshold)
        metrics.update(m)
    metrics.update(offpolicy_metrics(train_logp, rollout_logp, mask))
    return weights, kept, prefixed(metrics)


def weighted_pg_loss(
    pg_loss: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor, per: str
) -> torch.Tensor:
    """A policy loss's per-token terms times the IS weights, as verl's losses apply them: per token
    (`per="token"`), or for a loss of whole sequences (geo_mean) their geometric mean over each
    sequence's tokens, exp(sum_t m_t log(w_t + 1e-10) / (|y| + 1e-8))."""
    if per == "token":
        return pg_loss * weights
    mask = mask.to(weights.dtype)
    seq = torch.exp((torch.log(weights + 1e-10) * mask).sum(-1) / (mask.sum(-1) + 1e-8))
    return pg_loss * seq.unsqueeze(-1)


def correction_enabled(cfg, calculate_log_probs: bool) -> bool:
    """Whether a run computes rollout correction at all: weights, rejection or bypass asked for, or
    verl's metrics-only mode (rollout.calculate_log_probs: the rollout's log-probs reach the trainer,
    and verl then reports rollout_corr/* with nothing corrected)."""
    return bool(
        cfg.rollout_is is not None or cfg.rollout_rs is not None or cfg.bypass_mode or calculate_log_probs
    )
