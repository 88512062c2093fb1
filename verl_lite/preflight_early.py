"""Start-up's first phase, before the components are imported: verl's placeholder model and data
paths (its defaults: `~/models/...`, `~/data/rlhf/gsm8k/...`), alone, so a bare `python -m
verl_lite.main_ppo` gets one message naming them and the demo command; then each value's domain
(VALUES). main_ppo runs `check_early` before torch, transformers and Ray are imported, so a refused
value is reported in about a second: this module and what it imports at the top are light on
purpose (tests/test_preflight.py checks it). The rest of start-up, in order, is
verl_lite/preflight.py; the two share `Step` and `run_phase`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verl_lite.config.errors import ConfigError
from verl_lite.config.keys import links_of
from verl_lite.config.run import Run
from verl_lite.config.schema import VERL_MODEL, VERL_REWARD_MODEL, VERL_TRAIN, VERL_VAL
from verl_lite.config.values import check_values

if TYPE_CHECKING:
    from verl_lite.config.schema import PPOTrainerConfig

ARR = "actor_rollout_ref"
DEMO_COMMAND = "python -m verl_lite.main_ppo --config-name demo"
PLACEHOLDERS = (VERL_MODEL, VERL_REWARD_MODEL, VERL_TRAIN, VERL_VAL)


@dataclass(frozen=True)
class Step:
    name: str
    fn: Callable[..., list[str]]  # (cfg, run, *what the phase has loaded) -> one line per problem
    needs_clean: bool = False  # runs only when the steps before it in its phase found nothing


VALUES: list[Step] = [Step("value domains", check_values)]


def run_phase(steps: list[Step], cfg: PPOTrainerConfig, run: Run, *loaded) -> None:
    """Every step of a phase; ConfigError listing all their problems."""
    problems: list[str] = []
    for step in steps:
        if step.needs_clean and problems:
            continue
        problems += step.fn(cfg, run, *loaded)
    if problems:
        raise ConfigError(problems)


def run_of(cfg: PPOTrainerConfig, num_gpus: int | None = None) -> Run:
    """What the config amounts to (roles.py); `num_gpus`: GPUs visible (default: here)."""
    from verl_lite.roles import run_of as roles_run_of  # the estimators' registry: torch
    from verl_lite.utils import device as dev

    return roles_run_of(cfg, dev.num_visible_gpus() if num_gpus is None else num_gpus)


def may_hold_placeholders(cfg: PPOTrainerConfig) -> bool:
    """Whether any model or data path is still one of verl's placeholders (roles not yet known)."""
    d, rm = cfg.data, cfg.reward_model
    paths = (cfg.actor_rollout_ref.model.path, cfg.critic.model.path, rm.model.path if rm.enable else None)
    values = [*paths, d.train_files, d.val_files]
    return any(v in (p, [p]) for v in values for p in PLACEHOLDERS)


def check_placeholders(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """verl's placeholder model and data paths, still in place and absent here: one problem naming
    them all and the demo command (what a bare `python -m verl_lite.main_ppo` gets)."""
    d = cfg.data
    candidates = [(f"{ARR}.model.path", cfg.actor_rollout_ref.model.path, VERL_MODEL)]
    if run.critic:
        candidates.append(("critic.model.path", cfg.critic.model.path, VERL_MODEL))
    if run.reward_model:
        candidates.append(("reward_model.model.path", cfg.reward_model.model.path, VERL_REWARD_MODEL))
    candidates += [("data.train_files", d.train_files, VERL_TRAIN), ("data.val_files", d.val_files, VERL_VAL)]
    missing = [
        f"{key}={placeholder}"
        for key, value, placeholder in candidates
        if value in (placeholder, [placeholder]) and not os.path.exists(os.path.expanduser(placeholder))
    ]
    if not missing:
        return []
    many = len(missing) > 1
    return [
        f"{', '.join(missing)}: verl's placeholder path{'s' if many else ''}, not on this machine; point "
        f"{'them' if many else 'it'} at your model and parquet files, or run the embedded tiny demo: {DEMO_COMMAND}"
    ]


def placeholders_first(cfg: PPOTrainerConfig, num_gpus: int | None) -> Run | None:
    """verl's placeholder paths (verl's defaults, not a user's mistakes): this one message only. The
    roles (which decide whether the critic's path counts) are worked out only when a path is one."""
    if not may_hold_placeholders(cfg):
        return None
    run = run_of(cfg, num_gpus)
    placeholders = check_placeholders(cfg, run)
    if placeholders:
        raise ConfigError(placeholders)
    return run


def check_early(cfg: PPOTrainerConfig) -> None:
    """The placeholder paths and VALUES, needing no component (no role is known yet: a role's keys
    count as unread)."""
    placeholders_first(cfg, None)
    run_phase(
        VALUES,
        cfg,
        Run(
            world=0,
            critic=False,
            ref=False,
            reward_model=False,
            num_gpus=0,
            use_gpu=False,
            links=links_of(cfg),
        ),
    )
