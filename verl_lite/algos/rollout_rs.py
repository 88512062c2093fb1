"""Rollout rejection sampling (`algorithm.rollout_correction.rollout_rs`, verl's options and metrics):
drop the tokens or whole sequences whose divergence between the training and the rollout policy leaves
the configured bounds, by zeroing them in the response mask.

With l_t = log r_t = log pi_train - log pi_rollout, bounded to +-20, three per-token divergences:
k1 = -l_t, k2 = l_t^2 / 2, k3 = exp(l_t) - 1 - l_t. An option names one and where it is taken:
token_k{1,2,3} per token; seq_sum_k{1,2,3}, seq_mean_k{1,2,3} over a sequence's tokens, seq_max_k{2,3}
the worst token of a sequence (then the whole sequence is kept or dropped). k1 options keep
log(lower) <= stat <= log(upper); k2/k3 keep stat <= upper. `rollout_rs` may chain options with
commas ("token_k1,seq_max_k2"): a token stays only if every option keeps it. `rollout_rs_threshold`:
one value for all options or one per option; for k1 "lower_upper" (e.g. "0.5_2.0") or a single upper
bound with lower = 1 / upper; for k2/k3 one positive upper bound. Seq_mean_k1 is verl's geometric
rejection (Geo-RS: the geometric mean of the ratios within bounds).
"""

from __future__ import annotations

import math

import torch

from verl_lite.algos.masked import masked_mean

SAFETY_BOUND = 20.0  # exp(+-20) bounds every ratio, as verl's
RS_OPTIONS = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)
KEY = "algorithm.rollout_correction"


def parse_options(rollout_rs: str) -> list[str]:
    """The options of a comma-separated rollout_rs, in order, without repeats."""
    if not isinstance(rollout_rs, str) or not rollout_rs.strip():
        raise ValueError(f"{KEY}.rollout_rs={rollout_rs!r} names no option; use some of {list(RS_OPTIONS)}")
    options = list(dict.fromkeys(o.strip() for o in rollout_rs.split(",") if o.strip()))
    unknown = [o for o in options if o not in RS_OPTIONS]
    if unknown:
        raise ValueError(f"{KEY}.rollout_rs: {unknown} not among {list(RS_OPTIONS)}")
    return options


def parse_thresholds(options: list[str], spec) -> dict[str, tuple[float | None, float]]:
    """option -> (lower or None, upper) from rollout_rs_threshold (verl's rules, module docstring)."""
    if spec is None:
        raise ValueError(f"{KEY}.rollout_rs_threshold is null: rejection sampling needs its bounds")
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise ValueError(f"{KEY}.rollout_rs_threshold={spec!r} must be a number or a string of them")
    parts = [str(spec)] if not isinstance(spec, str) else [p.strip() for p in spec.split(",") if p.strip()]
    if len(parts) not in (1, len(options)):
        raise ValueError(
            f"{KEY}.rollout_rs_threshold={spec!r}: give one value for all {len(options)} options or one per option"
        )
    parts = parts * len(options) if len(parts) == 1 else parts
    out = {}
    for option, part in zip(options, parts):
        if "_" in part and not option.endswith("k1"):
            raise ValueError(f"{KEY}.rollout_rs_threshold: {option} takes one upper bound, not {part!r}")
        try:
            bounds = [float(x) for x in part.split("_", 1)]
        except ValueError:
            raise ValueError(f"{KEY}.rollout_rs_threshold: {part!r} for {option} is not a number") from None
        if not all(math.isfinite(b) and b > 0 for b in bounds):  # nan passes `<= 0` and rejects all
            raise ValueError(
                f"{KEY}.rollout_rs_threshold: bounds for {option} must be finite positive numbers, got {part!r}"
            )
        if option.endswith("k1"):
            lower, upper = bounds if len(bounds) == 2 else (1.0 / bounds[0], bounds[0])
            if lower > upper:  # the range is empty: every sequence would be rejected
                raise ValueError(
                    f"{KEY}.rollout_rs_threshold: {option}'s range {part!r} has its lower bound above its upper; "
                    "write lower_upper, e.g. 0.5_2.0"
                )
            out[option] = (lower, upper)
        else:
            out[option] = (None, bounds[0])
    return out


def rs_problems(rollout_rs, threshold) -> list[str]:
    """What is wrong with rollout_rs / rollout_rs_threshold ([] when rejection is off)."""
    if rollout_rs is None:
        return []
    try:
        parse_thresholds(parse_options(rollout_rs), threshold)
    except ValueError as e:
        return [str(e)]
    return []


def _statistic(option: str, log_ratio: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(the option's statistic: per token (bs, T) or per sequence (bs,), whether per sequence)."""
    k = {
        "k1": -log_ratio,
        "k2": 0.5 * log_ratio.square(),
        "k3": torch.exp(log_ratio) - 1.0 - log_ratio,
    }[option[-2:]]
    if option.startswith("token"):
        return k, False
    if option.startswith("seq_sum"):
        return (k * mask).sum(-1), True
    if option.startswith("seq_mean"):
        return (k * mask).sum(-1) / (mask.sum(-1) + 1e-8), True
    worst = k.masked_fill(~mask.bool(), float("-inf")).max(-1).values
    return torch.where(torch.isinf(worst), torch.zeros_like(worst), worst), True


@torch.no_grad()
def rejection_mask(
    log_ratio: torch.Tensor, mask: torch.Tensor, rollout_rs: str, threshold
) -> tuple[torch.Tensor, dict[str, float]]:
    """(the response mask with rejected tokens zeroed, in mask's dtype, and the metrics)."""
    options = parse_options(rollout_rs)
    bounds = parse_thresholds(options, threshold)
    log_ratio = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    fmask = mask.to(log_ratio.dtype)
    valid, has_tokens = mask.bool(), mask.sum(-1) > 0
    keep_all = torch.ones_like(fmask)
    metrics: dict[str, float] = {}
    for option in options:
        lower, upper = bounds[option]
        stat, per_seq = _statistic(option, log_ratio, fmask)
        low, high = (math.log(lower), math.log(upper)) if lower is not None else (0.0, upper)
        keep = (stat <= high) & (stat >= low) if lower is not None else stat <= high
        token_keep = keep.unsqueeze(-1).expand_as(valid) if per_seq else keep
        keep_all = keep_all * token_keep.to(fmask.dtype)
        token_stat = stat.unsqueeze(-1).expand_as(fmask) if per_seq else stat
        metrics.update(
            _rs_metrics(option, token_stat, stat if per_seq else None, fmask, has_tokens, low, high, lower)
        )
        dropped = (~token_keep) & valid
        metrics[f"rollout_rs_{option}_masked_fraction"] = float(masked_mean(dropped.float(), fmask))
        seq_dropped = dropped.any(-1)
        metrics[f"rollout_rs_{option}_seq_masked_fraction"] = (
            float(seq_dropped[has_tokens].float().mean()) if has_tokens.any() else 0.0
        )
    metrics["rollout_rs_masked_fraction"] = float(masked_mean(1 - keep_all, fmask))
    metrics["rollout_rs_seq_masked_fraction"] = float(((keep_all < 0.5) & valid).any(-1).float().mean())
    return (mask * keep_all).to(mask.dtype), metrics


def _rs_metrics(option, token_stat, seq_stat, mask, has_tokens, low, high, lower) -> dict[str, float]:
    """verl's compute_rs_metrics for one option (thresholds in the statistic's units)."""
    p = f"rollout_rs_{option}"
    valid = mask.bool()
    seq = seq_stat if seq_stat is not None else (token_stat * mask).sum(-1) / (mask.sum(-1) + 1e-8)
    seq = seq[has_tokens]
    two_sided = lower is not None
    out = {f"{p}_mean": float(masked_mean(token_stat, mask))}
    if seq_stat is not None and seq.numel():
        out[f"{p}_max"], out[f"{p}_min"] = float(seq.max()), float(seq.min())
        out[f"{p}_fraction_high"] = float((seq > high).float().mean())
        out[f"{p}_fraction_low"] = float((seq < low).float().mean()) if two_sided else 0.0
    else:
        out[f"{p}_max"] = float(token_stat.masked_fill(~valid, float("-inf")).max())
        out[f"{p}_min"] = float(token_stat.masked_fill(~valid, float("inf")).min())
        out[f"{p}_fraction_high"] = float(masked_mean((token_stat > high).float(), mask))
        out[f"{p}_fraction_low"] = float(masked_mean((token_stat < low).float(), mask)) if two_sided else 0.0
    if mask.sum() > 1:
        clamped = token_stat.clamp(min=low if two_sided else 0.0, max=high)
        mean = masked_mean(clamped, mask)
        out[f"{p}_std"] = float(
            torch.sqrt((masked_mean(clamped.square(), mask) - mean.square()).clamp(min=0))
        )
    else:
        out[f"{p}_std"] = 0.0
    if seq.numel():
        out[f"{p}_seq_mean"], out[f"{p}_seq_max"], out[f"{p}_seq_min"] = (
            float(seq.mean()),
            float(seq.max()),
            float(seq.min()),
        )
        out[f"{p}_seq_std"] = float(seq.std()) if seq.numel() > 1 else 0.0
        out[f"{p}_seq_max_deviation"] = float(seq.abs().max())
        out[f"{p}_seq_fraction_high"] = float((seq > high).float().mean())
        if two_sided:
            out[f"{p}_seq_fraction_low"] = float((seq < low).float().mean())
    else:
        for name in ("seq_mean", "seq_std", "seq_max", "seq_min", "seq_max_deviation", "seq_fraction_high"):
            out[f"{p}_{name}"] = 0.0
        out[f"{p}_seq_fraction_low"] = 0.0
    return out
