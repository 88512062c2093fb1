"""Starting or joining Ray for a run (main_ppo calls start_ray before the workers are built).

A run joins the cluster named by ray_kwargs.ray_init.address or RAY_ADDRESS, else starts a local
Ray of its own (address="local": never another job's cluster that `ray start` left running).
ray_init.runtime_env applies either way: the job's environment, packages and working_dir on every
node. num_cpus and include_dashboard size and shape a Ray this run starts; a run that joins a
cluster refuses them at start-up (single_controller/checks.py), as ray.init would refuse num_cpus.

A local Ray runs its workers at the driver's priority (`LOCAL_SYSTEM_CONFIG`). Ray's default
`worker_niceness` is 15, for workers that run background tasks beside an interactive driver; here
the workers are the whole training (the FSDP2 engine and the rollout) and the driver mostly waits
on them, so at nice 15 they lose the CPU to the driver, Ray's own daemons and anything else on the
machine whenever those want it (measured: on a shared 2-core machine the worker of the tiny run
was the only process at nice 15 beside TRL's and the tests' at 0). A cluster started with `ray
start` keeps its own setting (RAY_worker_niceness=0 in the environment of `ray start` sets it).
"""

from __future__ import annotations

import logging
import os

import ray

from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.utils import process_guard

log = logging.getLogger(__name__)

# Ray's system config for a Ray this run starts: workers at nice 0, as the driver (module docstring),
# and no idle workers started ahead for the driver: Ray starts one per CPU (each importing Ray, ~0.5 s
# of CPU) for tasks, but every worker here is an actor with an environment of its own (its rank's
# variables), which an idle worker cannot take, so they only competed with the real workers' start
LOCAL_SYSTEM_CONFIG = {"worker_niceness": 0, "prestart_worker_first_driver": False}


def ray_init_kwargs(config: PPOTrainerConfig) -> dict:
    """Join the cluster in ray_kwargs.ray_init.address or RAY_ADDRESS, else start a local Ray."""
    r = config.ray_kwargs.ray_init
    address = r.address or os.environ.get("RAY_ADDRESS")
    if address and address != "local":
        # the run is a job of that cluster: its runtime_env as the user wrote it, nothing of ours added
        # (under `ray job submit` Ray refuses a key both envs set); the workers get our defaults
        # where it sets none (single_controller/ray_group.worker_env)
        given = set_fields(r.runtime_env)
        return {"address": address, **({"runtime_env": given} if given else {})}
    return {
        # "local": a new Ray of its own. Without it ray.init() joins any cluster `ray start` left
        # running on this machine (another job's), which is only wanted when asked for by address.
        "address": "local",
        "num_cpus": r.num_cpus,
        "include_dashboard": r.include_dashboard,
        "runtime_env": runtime_env(r.runtime_env),
        "_system_config": dict(LOCAL_SYSTEM_CONFIG),
    }


def set_fields(user: dict | None) -> dict:
    """The runtime_env fields given a value: a null field is Ray's default (verl's config carries
    `py_executable: null`, the Ray side of its uv launcher, set only under `uv run`)."""
    return {k: v for k, v in (user or {}).items() if v is not None}


def runtime_env(user: dict) -> dict:
    """ray_kwargs.ray_init.runtime_env with verl_lite's env_vars added (the user's win)."""
    env = set_fields(user)
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
