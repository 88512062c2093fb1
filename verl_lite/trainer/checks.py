"""The trainer's start-up checks (registered in verl_lite/preflight.py): verl's placeholder paths
(checked first, alone: one message), the device, the trackers, and checkpointing (resume mode,
what checkpoints hold, how many are kept). Each rule is the one the trainer itself applies."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from verl_lite.engine.checkpoint import CONTENTS
from verl_lite.trainer.checkpoint import resume_problems
from verl_lite.trainer.tracking import logger_problems
from verl_lite.utils import device as dev

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig

ARR = "actor_rollout_ref"
DEMO_COMMAND = "python -m verl_lite.main_ppo --config-name demo"


def check_placeholders(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """verl's placeholder model and data paths, still in place and absent here: one problem naming
    them all and the demo command (what a bare `python -m verl_lite.main_ppo` gets)."""
    from verl_lite.config.schema import VERL_MODEL, VERL_REWARD_MODEL, VERL_TRAIN, VERL_VAL

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


def _checkpointing(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    t = cfg.trainer
    problems = resume_problems(t)
    # max_*_ckpt_to_keep positive or null: config/domains.py
    sections = [(f"{ARR}.actor.checkpoint", cfg.actor_rollout_ref.actor.checkpoint)]
    if run.critic:
        sections.append(("critic.checkpoint", cfg.critic.checkpoint))
    for prefix, ck in sections:
        for key, contents in (("save_contents", ck.save_contents), ("load_contents", ck.load_contents)):
            unknown = [c for c in contents if c not in CONTENTS]
            if unknown:
                problems.append(f"{prefix}.{key}: {unknown} not among {list(CONTENTS)}")
    # save_contents without 'model' (e.g. verl's ['hf_model']: HF exports only) is verl's meaning; a
    # resume that would load no weights is refused when it is found (checkpoint.weightless_resume)
    return problems


def _generation_batch(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """data.gen_batch_size: prompts per generation batch; DAPO's dynamic sampling keeps drawing such
    batches until train_batch_size prompts are kept, so only there may it differ."""
    d = cfg.data
    if d.gen_batch_size == d.train_batch_size:
        return []
    if not cfg.algorithm.filter_groups.enable:
        return [
            f"data.gen_batch_size={d.gen_batch_size} differs from data.train_batch_size={d.train_batch_size}: "
            "only DAPO's dynamic sampling (algorithm.filter_groups.enable=True) generates more prompts than it "
            "trains on; leave data.gen_batch_size unset"
        ]
    if d.gen_batch_size % run.world:  # positive: config/domains.py
        return [
            f"data.gen_batch_size={d.gen_batch_size} prompts cannot be split over {run.world} workers; "
            f"make it a multiple of {run.world}"
        ]
    return []


def check_trainer(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    problems = dev.device_problems(cfg.trainer.device, run.num_gpus)
    problems += logger_problems(cfg.trainer.logger)
    problems += _generation_batch(cfg, run)
    return problems + _checkpointing(cfg, run)
