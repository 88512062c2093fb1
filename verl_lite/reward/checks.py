"""Reward start-up check (registered in verl_lite/startup.py): the reward manager the run names and
the custom reward function's file. (A manager's own arguments, reward_model.reward_kwargs, are
checked when main_ppo builds it, also before Ray.)"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from verl_lite.reward.managers import REWARD_MANAGERS

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig


def check_reward(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    problems = []
    name = cfg.reward_manager.name
    if name not in REWARD_MANAGERS.names():
        problems.append(f"reward_manager.name={name!r} is not one of {list(REWARD_MANAGERS.names())}")
    path = cfg.custom_reward_function.path
    if path and not os.path.isfile(path):
        problems.append(f"custom_reward_function.path={path!r} does not exist")
    return problems
