"""Start-up's first phase, before the components are imported: verl's placeholder paths, then each
value's domain (VALUES). main_ppo runs `check_early` before torch, transformers and Ray are imported,
so a refused value is reported in about a second: this module and what it imports at the top are
light on purpose (tests/test_preflight.py checks it). The rest of start-up, and the order of it all,
is verl_lite/preflight.py; the two share `Step` and `run_phase`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from verl_lite.config.domains import check_values
from verl_lite.config.errors import ConfigError
from verl_lite.config.run import Run
from verl_lite.trainer.placeholders import check_placeholders, may_hold_placeholders

if TYPE_CHECKING:
    from verl_lite.config.schema import PPOTrainerConfig


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


def run_of(cfg: PPOTrainerConfig, num_gpus: int | None = None, links: dict[str, str] | None = None) -> Run:
    """What the config amounts to (roles.py); `num_gpus`: GPUs visible (default: here)."""
    from verl_lite.roles import run_of as roles_run_of  # the estimators' registry: torch
    from verl_lite.utils import device as dev

    run = roles_run_of(cfg, dev.num_visible_gpus() if num_gpus is None else num_gpus)
    return replace(run, links=dict(links or {}))


def placeholders_first(cfg: PPOTrainerConfig, num_gpus: int | None, links) -> Run | None:
    """verl's placeholder paths (verl's defaults, not a user's mistakes): this one message only. The
    roles (which decide whether the critic's path counts) are worked out only when a path is one."""
    if not may_hold_placeholders(cfg):
        return None
    run = run_of(cfg, num_gpus, links)
    placeholders = check_placeholders(cfg, run)
    if placeholders:
        raise ConfigError(placeholders)
    return run


def check_early(cfg: PPOTrainerConfig, links: dict[str, str] | None = None) -> None:
    """The placeholder paths and VALUES, needing no component. The values' steps need only the
    links of the Run."""
    placeholders_first(cfg, None, links)
    links_only = Run(world=0, critic=False, ref=False, reward_model=False, num_gpus=0, use_gpu=False)
    run_phase(VALUES, cfg, replace(links_only, links=dict(links or {})))
