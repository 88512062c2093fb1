"""The config's own start-up checks: values and their arithmetic, no component knowledge.

Values wrong only together, batch geometry (how train_batch_size, mini-batches, rollout.n and
micro-batches split over the workers, for the actor and for the critic), token budgets that must
hold one sequence. Each function returns one line per problem, naming the key, the value and the
fix; verl_lite/preflight.py runs them (after config/domains.py's one-value rules) with the components' own checks.
"""

from __future__ import annotations

from verl_lite.config.common import ARR, dp_size
from verl_lite.config.run import Run
from verl_lite.config.schema import PPOTrainerConfig


def check_relations(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """Values that are wrong only together (one value alone is config/domains.py's)."""
    problems: list[str] = []
    r = cfg.actor_rollout_ref.rollout
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


def _ranks(dp: int, world: int) -> str:
    return f"{dp} data-parallel ranks" if dp != world else f"{world} workers"


def _split(key: str, mini: int, n: int, dp: int, ranks: str, tbs: int, problems: list[str]) -> int | None:
    """The per-rank mini-batch (responses) of `key`'s mini-batch size over `dp` data-parallel ranks,
    or None if it cannot split."""
    if mini > tbs or tbs % mini:
        problems.append(
            f"data.train_batch_size={tbs} is not a multiple of {key}={mini}; each step must split into "
            "whole mini-batches"
        )
    if (mini * n) % dp:
        problems.append(
            f"{key} x rollout.n = {mini} x {n} = {mini * n} responses cannot be split over {ranks}; "
            f"make it a multiple of {dp}"
        )
        return None
    return mini * n // dp


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
    dp = dp_size(cfg)
    ranks = _ranks(dp, world)
    local_mini = _split(mini_key, a.ppo_mini_batch_size, n, dp, ranks, tbs, problems)
    if local_mini is None:
        return problems
    seq_len = cfg.data.max_prompt_length + arr.rollout.response_length
    budgets = [(f"{ARR}.actor.ppo_max_token_len_per_gpu", a.use_dynamic_bsz, a.ppo_max_token_len_per_gpu)]
    for section in ("rollout", "ref") if run.ref else ("rollout",):  # no KL term: no reference pass
        sub = getattr(arr, section)
        key = f"{ARR}.{section}.log_prob_max_token_len_per_gpu"
        budgets.append((key, sub.log_prob_use_dynamic_bsz, sub.log_prob_max_token_len_per_gpu))
        if not sub.log_prob_use_dynamic_bsz and sub.log_prob_micro_batch_size_per_gpu is None:
            problems.append(f"{ARR}.{section}.log_prob_micro_batch_size_per_gpu is not set; set it (e.g. 8)")
    problems += _budgets(budgets, seq_len)
    if not a.use_dynamic_bsz:  # with dynamic batching, micro-batches come from the token budget
        detail = f"ppo_mini_batch_size {a.ppo_mini_batch_size} x rollout.n {n} / {ranks}"
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
    dp = dp_size(cfg, "critic")
    ranks = _ranks(dp, run.world)
    local_mini = _split(
        "critic.ppo_mini_batch_size", c.ppo_mini_batch_size, n, dp, ranks, cfg.data.train_batch_size, problems
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
        detail = f"critic.ppo_mini_batch_size {c.ppo_mini_batch_size} x rollout.n {n} / {ranks}"
        problems += _micro(
            "critic.ppo_micro_batch_size_per_gpu",
            c.ppo_micro_batch_size_per_gpu,
            local_mini,
            "critic mini-batch",
            detail,
        )
        if c.forward_micro_batch_size_per_gpu is None:
            problems.append("critic.forward_micro_batch_size_per_gpu is not set; set it (e.g. 8)")
    return problems
