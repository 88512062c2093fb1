"""What the config modules share: verl's key prefix, the worker count, verl's rule for deprecated
global micro-batch sizes, and how a value is written on a command line."""

from __future__ import annotations

from verl_lite.config.schema import PPOTrainerConfig

ARR = "actor_rollout_ref"


def world_size(cfg: PPOTrainerConfig) -> int:
    """nnodes x n_gpus_per_node; 0 while either is null (config/domains.py reports it, before any use)."""
    return (cfg.trainer.nnodes or 0) * (cfg.trainer.n_gpus_per_node or 0)


def per_gpu(global_size, per_gpu, world: int, key: str, problems: list[str]):
    """verl's rule: a deprecated global micro size becomes a per-GPU one; not both."""
    if global_size is None:
        return per_gpu
    if per_gpu is not None:
        problems.append(f"{key} and {key}_per_gpu are both set; keep only {key}_per_gpu")
        return per_gpu
    if global_size % world:
        problems.append(
            f"{key}={global_size} is not divisible by the {world} workers; set {key}_per_gpu instead"
        )
        return per_gpu
    return global_size // world


def format_value(value) -> str:
    """A value as it would be written on a Hydra command line."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return value if value else "''"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    return str(value)
