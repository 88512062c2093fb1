"""Reward start-up steps (registered in verl_lite/preflight.py): the reward manager the run names,
the custom reward function's file, and, once the datasets are loaded, a scorer for every
data_source they hold. (A manager's own arguments, reward_model.reward_kwargs, are checked when
main_ppo builds it, also before Ray.)"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from verl_lite.reward.managers import REWARD_MANAGERS
from verl_lite.reward.scorers import known_sources, missing_scorers

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig


def check_reward(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    problems = []
    name = cfg.reward_manager.name
    if name not in REWARD_MANAGERS.names():
        problems.append(f"reward_manager.name={name!r} is not one of {list(REWARD_MANAGERS.names())}")
    path = cfg.custom_reward_function.path
    if name == "batch" and not path and not run.reward_model:
        problems.append(
            "reward_manager.name=batch calls the reward function once per batch with lists (data_sources, "
            "solution_strs, ground_truths, extra_infos), which the built-in scorers do not take: set "
            "custom_reward_function.path and .name to such a function, or use naive"
        )
    if path and not os.path.isfile(path):
        what = "is a directory" if os.path.isdir(path) else "does not exist"
        problems.append(
            f"custom_reward_function.path={path!r} {what}; point it at the .py file defining the reward function"
        )
    return problems


def _sources_problem(dataset, files_key: str, reward_fn_key: str) -> str | None:
    sources = [row[reward_fn_key] for row in dataset.rows]
    missing = missing_scorers(sources)
    if not missing:
        return None
    first = next(i for i, s in enumerate(sources) if s == missing[0])
    return (
        f"{files_key}: no reward scorer for {reward_fn_key} {missing} (e.g. {dataset.where(first)}); "
        f"built-in scorers know {known_sources()}: set custom_reward_function.path and .name"
    )


def check_scorers(cfg: PPOTrainerConfig, run: Run, train, val) -> list[str]:
    """With the built-in scorers (no custom function, no reward model), one for every data_source."""
    if cfg.custom_reward_function.path or run.reward_model:
        return []
    problems = []
    for files_key, dataset in (("data.train_files", train), ("data.val_files", val)):
        found = dataset is not None and _sources_problem(dataset, files_key, cfg.data.reward_fn_key)
        problems += [found] if found else []
    return problems
