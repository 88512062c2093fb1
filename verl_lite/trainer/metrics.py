"""Batch metrics with verl's names, computed on the driver from the step's DataProto."""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

import numpy as np
import torch

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
    response_len = mask.sum(-1).float()
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
