"""Start-up: everything about a run that can be known before Ray starts, resolved and checked in
one place, with each rule living next to its component.

    build_config (config/compose.py)   composed, verl's '+' spellings, support table, resolved
    prepare(cfg)                       placeholders, then RESOLVE steps, then CHECKS: one
                                       ConfigError listing every problem, one line each
    (main_ppo: tokenizer, datasets, reward manager, resume checkpoint — also before Ray)
    freeze (config/freeze.py)          in RayPPOTrainer.init_workers, after trainer.auto_offload's
                                       choice, before any worker is built

A step is a function `(cfg, run) -> list[str]` (one line per problem, naming the key, the value and
the fix) defined next to its component; adding a check is writing that function and one line in
CHECKS. A RESOLVE step may also fill derived values in place. A step marked `needs_clean` runs only
when the steps before it found nothing (its arithmetic assumes sane values).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from verl_lite.algos.checks import check_algorithm
from verl_lite.config import normalize, validate
from verl_lite.config.errors import ConfigError
from verl_lite.config.run import Run
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.data.assets import resolve_config_paths
from verl_lite.data.checks import check_data
from verl_lite.engine.checks import check_engines
from verl_lite.reward.checks import check_reward
from verl_lite.roles import run_of
from verl_lite.rollout.checks import check_rollout, resolve_rollout
from verl_lite.trainer.checks import check_placeholders, check_trainer
from verl_lite.utils import device as dev
from verl_lite.workers.checks import check_models

StepFn = Callable[[PPOTrainerConfig, Run], list[str]]


@dataclass(frozen=True)
class Step:
    name: str
    fn: StepFn
    needs_clean: bool = False


RESOLVE: list[Step] = [
    Step("embedded assets and ~ in paths", lambda cfg, run: resolve_config_paths(cfg)),
    Step("verl's derived values", lambda cfg, run: normalize.normalize(cfg)),
    Step("rollout", resolve_rollout),
]

CHECKS: list[Step] = [
    Step("values", validate.check_values),
    Step("rollout", check_rollout),
    Step("engines", check_engines),
    Step("algorithm", check_algorithm),
    Step("reward", check_reward),
    Step("data", check_data),
    Step("trainer", check_trainer),
    Step("models", check_models),
    Step("batch geometry", validate.check_batch_geometry, needs_clean=True),
    Step("critic batch geometry", validate.check_critic_geometry, needs_clean=True),
]


def _run_steps(steps: list[Step], cfg: PPOTrainerConfig, run: Run, problems: list[str]) -> None:
    for step in steps:
        if step.needs_clean and problems:
            continue
        problems += step.fn(cfg, run)


def check(cfg: PPOTrainerConfig, run: Run) -> None:
    """Every CHECKS step; ConfigError listing all problems (also after trainer.auto_offload's choice)."""
    problems: list[str] = []
    _run_steps(CHECKS, cfg, run, problems)
    if problems:
        raise ConfigError(problems)


def prepare(cfg: PPOTrainerConfig, num_gpus: int | None = None) -> Run:
    """Resolve and check `cfg` in place; the Run it amounts to. `num_gpus`: GPUs visible (default: here)."""
    run = run_of(cfg, dev.num_visible_gpus() if num_gpus is None else num_gpus)
    placeholders = check_placeholders(cfg, run)
    if placeholders:  # verl's defaults, not a user's mistakes: this one message only
        raise ConfigError(placeholders)
    problems: list[str] = []
    _run_steps(RESOLVE, cfg, run, problems)
    if problems:
        raise ConfigError(problems)
    check(cfg, run)
    return run
