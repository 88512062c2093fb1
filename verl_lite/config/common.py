"""What the config modules share: verl's key prefix, the worker count and each role's data-parallel
size, verl's rule for deprecated global micro-batch sizes, and how a value is written on a command line.

Ulysses sequence parallelism (sp) makes groups of sp consecutive ranks share each micro-batch, so a
role has world / sp data-parallel ranks: mini-batches and the deprecated global micro-batch sizes are
split that many ways (verl's rule). That sp and fsdp_size tile the workers is the engine's rule
(engine/mesh.py, checked at start-up by engine/checks.py)."""

from __future__ import annotations

from verl_lite.config.schema import PPOTrainerConfig

ARR = "actor_rollout_ref"
# The fsdp_config section of each role's engine, by role (the one list: support table, value domains,
# the engine's start-up checks).
FSDP_SECTIONS = {
    "actor": f"{ARR}.actor.fsdp_config",
    "ref": f"{ARR}.ref.fsdp_config",
    "critic": "critic.fsdp",
    "reward_model": "reward_model.model.fsdp_config",
}


def trainer_mode(cfg: PPOTrainerConfig) -> str:
    """verl 0.9's trainer mode: trainer.v1.trainer_mode with trainer.use_v1 (verl's legacy trainer,
    which ignores trainer.v1, is the sync one)."""
    return cfg.trainer.v1.trainer_mode if cfg.trainer.use_v1 else "sync"


def prompts_per_draw(cfg: PPOTrainerConfig) -> int:
    """Prompts the trainer's sampler draws at a time: data.gen_batch_size (train_batch_size, or more
    under DAPO), but train_batch_size under verl 0.9's async modes, which fetch prompts one at a time
    into the replay buffer (verl sets gen_batch_size to 1 there: it changes no prompt or step)."""
    return cfg.data.train_batch_size if trainer_mode(cfg) != "sync" else cfg.data.gen_batch_size


def updates_per_step(cfg: PPOTrainerConfig) -> int:
    """Updates (LR schedule steps) per training step: separate_async's parameter_sync_step local
    updates (verl 0.9 sizes the LR schedule as total_training_steps x parameter_sync_step), else 1."""
    return cfg.trainer.v1.separate_async.parameter_sync_step if trainer_mode(cfg) == "separate_async" else 1


def world_size(cfg: PPOTrainerConfig) -> int:
    """nnodes x n_gpus_per_node; 0 while either is null (config/domains.py reports it, before any use)."""
    return (cfg.trainer.nnodes or 0) * (cfg.trainer.n_gpus_per_node or 0)


def sp_size(cfg: PPOTrainerConfig, role: str) -> int:
    if role == "critic":
        return cfg.critic.ulysses_sequence_parallel_size
    return cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size


def dp_size(cfg: PPOTrainerConfig, role: str = "actor") -> int:
    """Data-parallel ranks of `role` (actor or critic): the world over its sequence-parallel size
    (the world itself while that size is invalid: engine/checks.check_levers reports it)."""
    world, sp = world_size(cfg), sp_size(cfg, role)
    return world // sp if 0 < sp <= world and world % sp == 0 else world


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
