"""Starting or joining Ray for a run (main_ppo calls start_ray before the workers are built).

A run joins the cluster named by ray_kwargs.ray_init.address or RAY_ADDRESS, else starts a local
Ray of its own (address="local": never another job's cluster that `ray start` left running).

A local Ray runs its workers at the driver's priority (`LOCAL_SYSTEM_CONFIG`). Ray's default
`worker_niceness` is 15, for workers that run background tasks beside an interactive driver; here
the workers are the whole training (the FSDP2 engine and the rollout) and the driver mostly waits
on them, so at nice 15 they lose the CPU to the driver, Ray's own daemons and anything else on the
machine whenever those want it (measured: on a shared 2-core machine the worker of the tiny run
was the only process at nice 15 beside TRL's and the tests' at 0). A cluster started with `ray
start` keeps its own setting (RAY_worker_niceness=0 in the environment of `ray start` sets it).

A local Ray's workers also get glibc's malloc tuning (`MALLOC_ENV`), so that the update reuses its
activations' memory from one step to the next instead of giving it back to the kernel and taking
it again zero-filled. glibc's defaults mmap every block above a threshold that adapts only up to
32 MiB, and return the heap's free top to the kernel whenever it exceeds twice that (64 MiB): an
update whose activations are larger than that faults all of them in again on every step.
Measured (docs/performance.md, issue 25; 21M Qwen2, one 32-row update of ~3,200 tokens beside
vLLM): 12k-52k minor page faults and 0.16-0.28 s in the kernel per update before, 1-23k and
0.02-0.07 s after. The values: blocks up to 32 MiB (glibc's largest allowed threshold) come
from the heap, and the heap keeps up to 1 GiB of free memory at its top, grown 64 MiB at a time;
a worker so keeps what its last update used (never more than its peak) for the next one. A
value the user set wins: in the environment where the run starts (which the workers inherit),
as GLIBC_TUNABLES' `glibc.malloc.*` of the same knob, or in ray_kwargs.ray_init.runtime_env's
env_vars. Other C libraries ignore the variables. A cluster joined by address keeps its own
environment.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import ray

from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.utils import process_guard

log = logging.getLogger(__name__)

# Ray's system config for a Ray this run starts: workers at nice 0, as the driver (module docstring)
LOCAL_SYSTEM_CONFIG = {"worker_niceness": 0}

# glibc malloc tuning for a local Ray's workers (module docstring): variable -> (tunable, value)
MALLOC_ENV = {
    "MALLOC_MMAP_THRESHOLD_": ("glibc.malloc.mmap_threshold", str(32 * 1024**2)),
    "MALLOC_TRIM_THRESHOLD_": ("glibc.malloc.trim_threshold", str(1024**3)),
    "MALLOC_TOP_PAD_": ("glibc.malloc.top_pad", str(64 * 1024**2)),
}


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
        "_system_config": dict(LOCAL_SYSTEM_CONFIG),
    }


def runtime_env(user: dict, environ: Mapping[str, str] | None = None) -> dict:
    """ray_kwargs.ray_init.runtime_env with verl_lite's env_vars added (the user's win: those
    env_vars, and for the malloc tuning also `environ`, the starting environment the workers inherit)."""
    env = dict(user or {})
    given = dict(env.get("env_vars") or {})
    env["env_vars"] = {
        "TOKENIZERS_PARALLELISM": "false",
        **malloc_defaults([os.environ if environ is None else environ, given]),
        **given,
    }
    return env


def malloc_defaults(sources: list[Mapping[str, str]]) -> dict[str, str]:
    """MALLOC_ENV's variables that none of `sources` sets, by name or by its GLIBC_TUNABLES tunable."""
    tunables = [t.split("=")[0].strip() for s in sources for t in s.get("GLIBC_TUNABLES", "").split(":")]
    return {
        name: value
        for name, (tunable, value) in MALLOC_ENV.items()
        if not any(name in s for s in sources) and tunable not in tunables
    }


def start_ray(config: PPOTrainerConfig) -> None:
    if not ray.is_initialized():
        kwargs = ray_init_kwargs(config)
        process_guard.start()  # whatever ends this process, Ray's processes (and any other) end with it
        ray.init(**kwargs)
        if "num_cpus" in kwargs:  # Ray's own notice goes to the log file
            log.info("started a local Ray instance (%s CPUs)", ray.cluster_resources().get("CPU", 0))
        else:
            log.info("joined the Ray cluster at %s", kwargs["address"])
