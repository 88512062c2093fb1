"""The config's own start-up checks: values and their arithmetic, no component knowledge.

Sizes that must be positive, batch geometry (how train_batch_size, mini-batches, rollout.n and
micro-batches split over the workers, for the actor and for the critic), token budgets that must
hold one sequence. Each function returns one line per problem, naming the key, the value and the
fix; verl_lite/startup.py runs them with the components' own checks.
"""

from __future__ import annotations

from verl_lite.config.common import ARR
from verl_lite.config.run import Run
from verl_lite.config.schema import PPOTrainerConfig


def check_values(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    problems: list[str] = []
    arr, t = cfg.actor_rollout_ref, cfg.trainer
    r = arr.rollout
    positive = [
        ("data.train_batch_size", cfg.data.train_batch_size),
        ("data.max_prompt_length", cfg.data.max_prompt_length),
        ("data.max_response_length", cfg.data.max_response_length),
        (f"{ARR}.actor.ppo_mini_batch_size", arr.actor.ppo_mini_batch_size),
        (f"{ARR}.actor.ppo_epochs", arr.actor.ppo_epochs),
        (f"{ARR}.rollout.n", r.n),
        (f"{ARR}.rollout.val_kwargs.n", r.val_kwargs.n),
        ("trainer.nnodes", t.nnodes),
        ("trainer.n_gpus_per_node", t.n_gpus_per_node),
        ("trainer.total_epochs", t.total_epochs),
    ]
    problems += [
        f"{key}={value} must be a positive integer" for key, value in positive if value is None or value <= 0
    ]
    if t.total_training_steps is not None and t.total_training_steps <= 0:
        problems.append(f"trainer.total_training_steps={t.total_training_steps} must be positive or null")
    if t.log_val_generations < 0:
        problems.append(f"trainer.log_val_generations={t.log_val_generations} must be >= 0 (0: log none)")
    if t.device_memory_gb is not None and t.device_memory_gb <= 0:
        problems.append(
            f"trainer.device_memory_gb={t.device_memory_gb} must be a positive size in GB, or null"
        )
    if r.do_sample and r.temperature <= 0:
        problems.append(
            f"{ARR}.rollout.temperature={r.temperature} must be > 0 when do_sample=True (or set do_sample=False)"
        )
    if r.prompt_length != cfg.data.max_prompt_length:
        problems.append(
            f"{ARR}.rollout.prompt_length={r.prompt_length} differs from data.max_prompt_length="
            f"{cfg.data.max_prompt_length}; prompts are padded to data.max_prompt_length, so set them equal"
        )
    return problems


def _split(key: str, mini: int, n: int, world: int, tbs: int, problems: list[str]) -> int | None:
    """The per-worker mini-batch (responses) of `key`'s mini-batch size, or None if it cannot split."""
    if mini > tbs or tbs % mini:
        problems.append(
            f"data.train_batch_size={tbs} is not a multiple of {key}={mini}; each step must split into "
            "whole mini-batches"
        )
    if (mini * n) % world:
        problems.append(
            f"{key} x rollout.n = {mini} x {n} = {mini * n} responses cannot be split over {world} workers; "
            f"make it a multiple of {world}"
        )
        return None
    return mini * n // world


def _budgets(budgets: list[tuple[str, bool, int]], seq_len: int) -> list[str]:
    """With dynamic batching every token budget must hold at least one whole sequence."""
    return [
        f"{key}={budget} is below one sequence (data.max_prompt_length + response_length = {seq_len}); "
        f"raise it to at least {seq_len}"
        for key, enabled, budget in budgets
        if enabled and budget < seq_len
    ]


def _micro(key: str, micro: int | None, local_mini: int, mini_key: str, detail: str) -> list[str]:
    if micro is None:
        return [f"{key} is not set; set it (e.g. {min(local_mini, 4)})"]
    if micro <= 0 or local_mini % micro:
        return [
            f"{key}={micro} does not divide the per-worker {mini_key} of {local_mini} responses ({detail}); "
            f"use a divisor of {local_mini}"
        ]
    return []


def check_batch_geometry(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """How a step's prompts split over workers, mini-batches and micro-batches (the actor's)."""
    problems: list[str] = []
    arr, world, tbs = cfg.actor_rollout_ref, run.world, cfg.data.train_batch_size
    a, n = arr.actor, arr.rollout.n
    if tbs % world:
        problems.append(
            f"data.train_batch_size={tbs} prompts cannot be split over {world} workers "
            f"(trainer.nnodes x trainer.n_gpus_per_node); make it a multiple of {world}"
        )
    mini_key = f"{ARR}.actor.ppo_mini_batch_size"
    local_mini = _split(mini_key, a.ppo_mini_batch_size, n, world, tbs, problems)
    if local_mini is None:
        return problems
    seq_len = cfg.data.max_prompt_length + arr.rollout.response_length
    budgets = [(f"{ARR}.actor.ppo_max_token_len_per_gpu", a.use_dynamic_bsz, a.ppo_max_token_len_per_gpu)]
    for section in ("rollout", "ref"):
        sub = getattr(arr, section)
        key = f"{ARR}.{section}.log_prob_max_token_len_per_gpu"
        budgets.append((key, sub.log_prob_use_dynamic_bsz, sub.log_prob_max_token_len_per_gpu))
        size = sub.log_prob_micro_batch_size_per_gpu
        if not sub.log_prob_use_dynamic_bsz and (size is None or size <= 0):
            problems.append(
                f"{ARR}.{section}.log_prob_micro_batch_size_per_gpu must be a positive integer, got {size}"
            )
    problems += _budgets(budgets, seq_len)
    if not a.use_dynamic_bsz:  # with dynamic batching, micro-batches come from the token budget
        detail = f"ppo_mini_batch_size {a.ppo_mini_batch_size} x rollout.n {n} / {world} workers"
        problems += _micro(
            f"{ARR}.actor.ppo_micro_batch_size_per_gpu",
            a.ppo_micro_batch_size_per_gpu,
            local_mini,
            "mini-batch",
            detail,
        )
    return problems


def check_critic_geometry(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """The critic's batch geometry follows the actor's rules, with critic.* keys in the messages."""
    if not run.critic:
        return []
    c, n, problems = cfg.critic, cfg.actor_rollout_ref.rollout.n, []
    if c.ppo_mini_batch_size <= 0 or c.ppo_epochs <= 0:
        return [
            f"critic.ppo_mini_batch_size={c.ppo_mini_batch_size} and critic.ppo_epochs={c.ppo_epochs} must be positive"
        ]
    if c.cliprange_value <= 0:
        problems.append(f"critic.cliprange_value={c.cliprange_value} must be > 0")
    if cfg.trainer.critic_warmup < 0:
        problems.append(f"trainer.critic_warmup={cfg.trainer.critic_warmup} must be >= 0")
    local_mini = _split(
        "critic.ppo_mini_batch_size", c.ppo_mini_batch_size, n, run.world, cfg.data.train_batch_size, problems
    )
    if local_mini is None:
        return problems
    seq_len = cfg.data.max_prompt_length + cfg.actor_rollout_ref.rollout.response_length
    problems += _budgets(
        [
            ("critic.ppo_max_token_len_per_gpu", c.use_dynamic_bsz, c.ppo_max_token_len_per_gpu),
            ("critic.forward_max_token_len_per_gpu", c.use_dynamic_bsz, c.forward_max_token_len_per_gpu),
        ],
        seq_len,
    )
    if not c.use_dynamic_bsz:
        detail = f"critic.ppo_mini_batch_size {c.ppo_mini_batch_size} x rollout.n {n} / {run.world} workers"
        problems += _micro(
            "critic.ppo_micro_batch_size_per_gpu",
            c.ppo_micro_batch_size_per_gpu,
            local_mini,
            "critic mini-batch",
            detail,
        )
        forward = c.forward_micro_batch_size_per_gpu
        if forward is None or forward <= 0:
            problems.append(
                f"critic.forward_micro_batch_size_per_gpu must be a positive integer, got {forward}"
            )
    return problems
