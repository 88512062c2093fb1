"""Hydra multirun: every job of a sweep gets its own output folder.

`python -m verl_lite.main_ppo -m key=a,b` runs the jobs one after another in one process. They
share project and experiment names, so the schema's default `trainer.default_local_dir`
(checkpoints/<project>/<experiment>) would make them append to one metrics.jsonl and, with
resume_mode=auto, resume from each other's checkpoints. Under multirun, unless the command line
sets trainer.default_local_dir itself, each job's outputs go to its Hydra job folder
(`<hydra.sweep.dir>/<hydra.sweep.subdir>`, e.g. multirun/2026-12-02/16-00-00/0), beside Hydra's
own .hydra/ record of that job's config and overrides. A directory set on the command line is
kept, and must differ per job (interpolate `${hydra:job.num}` or sweep it): a second job of this
process that resolves to a directory an earlier job used is refused.
"""

from __future__ import annotations

import os

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from verl_lite.config.schema import PPOTrainerConfig

KEY = "trainer.default_local_dir"
_dirs_used_by_earlier_jobs: set[str] = set()


def _set_on_command_line(overrides: list[str]) -> bool:
    return any(o.split("=", 1)[0].lstrip("+~") == KEY for o in overrides)


def apply_job_output_dir(cfg: PPOTrainerConfig) -> None:
    """Point trainer.default_local_dir at this job's folder under multirun; no-op otherwise."""
    if not HydraConfig.initialized():
        return
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return
    if not _set_on_command_line(list(hc.overrides.task)):
        cfg.trainer.default_local_dir = hc.runtime.output_dir
    if cfg.trainer.default_local_dir is None:
        return  # null: config/nulls.py names it, right after
    path = os.path.abspath(cfg.trainer.default_local_dir)
    if path in _dirs_used_by_earlier_jobs:
        raise ValueError(
            f"{KEY}={cfg.trainer.default_local_dir} was already used by an earlier job of this sweep "
            f"(job {hc.job.num}, overrides {list(hc.overrides.task)}); give each job its own, e.g. "
            f"{KEY}=<dir>/${{hydra:job.num}}, or leave it unset to use the Hydra job folder"
        )
    _dirs_used_by_earlier_jobs.add(path)
