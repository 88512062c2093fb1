"""Starting or joining Ray for a run (main_ppo calls start_ray before the workers are built).

A run joins the cluster named by ray_kwargs.ray_init.address or RAY_ADDRESS, else starts a local
Ray of its own (address="local": never another job's cluster that `ray start` left running).
"""

from __future__ import annotations

import logging
import os

import ray

from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.utils import process_guard

log = logging.getLogger(__name__)


def ray_init_kwargs(config: PPOTrainerConfig) -> dict:
    """Join the cluster in ray_kwargs.ray_init.address or RAY_ADDRESS, else start a local Ray."""
    r = config.ray_kwargs.ray_init
    address = r.address or os.environ.get("RAY_ADDRESS")
    if address:
        return {"address": address}
    return {
        # "local": a new Ray of its own. Without it ray.init() joins any cluster `ray start` left
        # running on this machine (another job's), which is only wanted when asked for by address.
        "address": "local",
        "num_cpus": r.num_cpus,
        "include_dashboard": r.include_dashboard,
        "runtime_env": runtime_env(r.runtime_env),
    }


def runtime_env(user: dict) -> dict:
    """ray_kwargs.ray_init.runtime_env with verl_lite's env_vars added (the user's win)."""
    env = dict(user or {})
    env["env_vars"] = {"TOKENIZERS_PARALLELISM": "false", **dict(env.get("env_vars") or {})}
    return env


def start_ray(config: PPOTrainerConfig) -> None:
    if not ray.is_initialized():
        kwargs = ray_init_kwargs(config)
        process_guard.start()  # whatever ends this process, Ray's processes (and any other) end with it
        ray.init(**kwargs)
        if "num_cpus" in kwargs:  # Ray's own notice goes to the log file
            log.info("started a local Ray instance (%s CPUs)", ray.cluster_resources().get("CPU", 0))
        else:
            log.info("joined the Ray cluster at %s", kwargs["address"])
