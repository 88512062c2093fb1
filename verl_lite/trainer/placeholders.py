"""verl's placeholder model and data paths (its defaults: `~/models/...`, `~/data/rlhf/gsm8k/...`),
checked first at start-up and alone: a bare `python -m verl_lite.main_ppo` gets one message naming
them and the demo command. Light on purpose (no torch): main_ppo runs it before the heavy imports."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from verl_lite.config.schema import VERL_MODEL, VERL_REWARD_MODEL, VERL_TRAIN, VERL_VAL

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig

ARR = "actor_rollout_ref"
DEMO_COMMAND = "python -m verl_lite.main_ppo --config-name demo"
PLACEHOLDERS = (VERL_MODEL, VERL_REWARD_MODEL, VERL_TRAIN, VERL_VAL)


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
