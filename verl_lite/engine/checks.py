"""The engine's start-up steps (registered in verl_lite/preflight.py) for every model the run trains
or serves (actor, ref, and the critic and reward model when the run has them): `check_levers`,
sequence parallelism and HSDP against the workers (engine/mesh.py's rules, the ones build_layout
applies); `check_engines`, the FSDP2 and optimizer settings: dtype names, offload combinations
(engine/offload.py's rule, the one the engine itself applies), LR schedules, and each model's
override_config.attn_implementation (engine/attention.py)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from verl_lite.config.common import FSDP_SECTIONS
from verl_lite.config.keys import lookup
from verl_lite.engine.attention import attention_problem
from verl_lite.engine.mesh import fsdp_size_problem, sp_size_problem
from verl_lite.engine.offload import offload_problems

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig

ARR = "actor_rollout_ref"
log = logging.getLogger("verl_lite.engine")


def fsdp_sections(cfg: PPOTrainerConfig, run: Run) -> list[tuple[str, object]]:
    """(key, fsdp_config) of every engine the run builds."""
    built = {"actor": True, "ref": run.ref, "critic": run.critic, "reward_model": run.reward_model}
    return [(key, lookup(cfg, key)) for role, key in FSDP_SECTIONS.items() if built[role]]


def check_levers(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """Sequence-parallel groups (of packed rows) and HSDP shard groups tile the workers; the
    reference shares the actor's groups (it runs in the actor's workers)."""
    arr, c = cfg.actor_rollout_ref, cfg.critic
    roles = [(f"{ARR}.actor", arr.actor, arr.model)] + ([("critic", c, c.model)] if run.critic else [])
    problems = []
    for prefix, section, model in roles:
        key, sp = f"{prefix}.ulysses_sequence_parallel_size", section.ulysses_sequence_parallel_size
        problem = sp_size_problem(run.world, sp, key)
        if problem is None and sp > 1 and not model.use_remove_padding:
            problem = f"{key}={sp} needs packed sequences: set the model's use_remove_padding=True (sequence parallelism splits packed rows)"
        problems += [problem] if problem else []
    if run.ref and arr.ref.ulysses_sequence_parallel_size != arr.actor.ulysses_sequence_parallel_size:
        problems.append(
            f"{ARR}.ref.ulysses_sequence_parallel_size={arr.ref.ulysses_sequence_parallel_size} differs from "
            f"the actor's {arr.actor.ulysses_sequence_parallel_size}: the reference runs in the actor's "
            "workers, on its sequence-parallel groups; leave it unset (it follows the actor's)"
        )
    sizes = [
        fsdp_size_problem(run.world, fsdp.fsdp_size, f"{key}.fsdp_size")
        for key, fsdp in fsdp_sections(cfg, run)
    ]
    return problems + [p for p in sizes if p]


def _fsdp_problems(key: str, fsdp) -> list[str]:
    if fsdp.offload_policy and (fsdp.param_offload or fsdp.optimizer_offload):
        log.info(
            "%s.offload_policy=True already keeps params, grads and optimizer state on the host; "
            "param_offload / optimizer_offload have nothing left to move and are ignored",
            key,
        )
    return offload_problems(fsdp, key)  # the dtypes' choices: config/values.py


def model_sections(cfg: PPOTrainerConfig, run: Run) -> list[tuple[str, object]]:
    """(key, model section) of every model the run loads: the actor's (also the ref's and the HF
    rollout's), the critic's and the reward model's when it has them."""
    sections = [(f"{ARR}.model", cfg.actor_rollout_ref.model)]
    if run.critic:
        sections.append(("critic.model", cfg.critic.model))
    if run.reward_model:
        sections.append(("reward_model.model", cfg.reward_model.model))
    return sections


def check_engines(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    problems = [p for key, fsdp in fsdp_sections(cfg, run) for p in _fsdp_problems(key, fsdp)]
    for key, model in model_sections(cfg, run):
        problem = attention_problem(model.override_config, key)
        problems += [problem] if problem else []
    return problems
