"""Batch metrics with verl's names, computed on the driver from the step's DataProto."""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

import numpy as np
import torch

from verl_lite.algos.masked import masked_mean, masked_sum, response_lengths
from verl_lite.algos.value_loss import explained_variance
from verl_lite.protocol import DataProto


@contextmanager
def timer(name: str, timings: dict[str, float]):
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    values = values.float()
    if values.numel() == 0:
        return {}
    return {
        f"{prefix}/mean": values.mean().item(),
        f"{prefix}/max": values.max().item(),
        f"{prefix}/min": values.min().item(),
    }


def compute_data_metrics(
    batch: DataProto, max_prompt_length: int, max_response_length: int
) -> dict[str, float]:
    b = batch.batch
    mask = b["response_mask"].bool()
    prompt_len = b["attention_mask"][:, : b["prompts"].shape[1]].sum(-1).float()
    response_len = response_lengths(b["attention_mask"], mask.shape[1]).float()  # verl's: tool turns too
    metrics = {
        **_stats("critic/score", b["token_level_scores"].sum(-1)),
        **_stats("critic/rewards", b["token_level_rewards"].sum(-1)),
        **_stats("critic/advantages", b["advantages"][mask]),
        **_stats("critic/returns", b["returns"][mask]),
        **_stats("response_length", response_len),
        "response_length/clip_ratio": (response_len >= max_response_length).float().mean().item(),
        **_stats("prompt_length", prompt_len),
        "prompt_length/clip_ratio": (prompt_len >= max_prompt_length).float().mean().item(),
    }
    if "values" in b:  # PPO with a critic
        metrics.update(_stats("critic/values", b["values"][mask]))
        metrics["critic/vf_explained_var"] = explained_variance(b["values"], b["returns"], mask)
    return metrics


@torch.no_grad()
def compute_variance_proxy_metrics(batch: DataProto, grad_norm: float | None) -> dict[str, float]:
    """verl's variance_proxy/* when the actor returned sum_pi_squared (actor.calculate_sum_pi_squared).

    With W_i = sum_t m_t (1 - 2 pi_t + sum_v pi_v^2) (the squared logit-gradient norm of response i,
    the OTB proxy) and a_i its mean token advantage: proxy2_total_power = mean_i a_i^2 max(W_i, 0)
    estimates E||g_i||^2 of one response's gradient; proxy1_signal_strength = grad_norm^2 that of the
    batch gradient; proxy3_pure_noise = max(0, (proxy2 - proxy1) / (N - 1)) the variance of the batch
    mean; plus the components E[a^2] and E[W]. Nothing without sum_pi_squared.
    """
    b = batch.batch
    if "sum_pi_squared" not in b:
        return {}
    mask = b["response_mask"].to(b["advantages"].dtype)
    energy = masked_sum(1.0 - 2.0 * b["old_log_probs"].exp() + b["sum_pi_squared"], mask, dim=-1)  # (bs,)
    advantage = masked_mean(b["advantages"], mask, dim=-1)  # (bs,)
    total_power = float((advantage.square() * energy.clamp(min=0.0)).mean())
    signal = grad_norm**2 if grad_norm is not None else None
    rows = advantage.shape[0]
    noise = max(0.0, (total_power - signal) / (rows - 1)) if signal is not None and rows > 1 else 0.0
    return {
        "variance_proxy/proxy1_signal_strength": signal if signal is not None else 0.0,
        "variance_proxy/proxy2_total_power": total_power,
        "variance_proxy/proxy3_pure_noise": noise,
        "variance_proxy/expected_a_squared": float(advantage.square().mean()),
        "variance_proxy/expected_w": float(energy.mean()),
    }


def compute_throughput_metrics(batch: DataProto, step_seconds: float, num_workers: int) -> dict[str, float]:
    total_tokens = int(batch.batch["attention_mask"].sum())
    return {
        "perf/total_num_tokens": total_tokens,
        "perf/time_per_step": step_seconds,
        "perf/throughput": total_tokens / (step_seconds * num_workers),
    }


def compute_val_metrics(scores: list[float], data_sources: list[str], n: int) -> dict[str, float]:
    """val-core/<data_source>/reward/mean@n: mean score of the n samples per prompt, per source."""
    by_source: dict[str, list[float]] = defaultdict(list)
    for score, source in zip(scores, data_sources):
        by_source[source].append(score)
    return {
        f"val-core/{src}/reward/mean@{n}": float(np.mean(vals)) for src, vals in sorted(by_source.items())
    }
