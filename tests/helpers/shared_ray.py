"""One Ray cluster per pytest process for the CLI runs that may join one (issue #39).

A CLI run that starts its own local Ray pays ~3.5 s for it (gcs, raylet, dashboard, agents; ~3 s of
CPU on a 2-core machine) and ~1.5 s to stop it. `joined_env()` gives a run the address of a cluster
this pytest process keeps (RAY_ADDRESS), the way a user's run joins a cluster that `ray start` or
Slurm made (trainer/ray_start.py): the run, its workers and its checks are the same, and Ray's
start is paid once. The head is a child Python process started with the system config a run's own
local Ray gets (LOCAL_SYSTEM_CONFIG: workers at the driver's priority) from the environment the
session started with, so its workers inherit what a run's workers would.

Before each run the head waits until every CPU of the cluster is free again (the previous run's
actors and placement groups are gone), so one run never finds the last one's workers; a cluster
that does not come free in a minute is replaced by a new one.

Runs that must keep a Ray of their own: those that check Ray's start or its processes (the notice
"Started a local Ray instance", no process left behind after a kill), those passing an environment
the workers must see (a joined run's workers inherit the cluster's, not the CLI's), and those setting
ray_kwargs.ray_init keys a joined run refuses (num_cpus, include_dashboard).
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys

# the session's environment, before any test's monkeypatch: what the cluster's workers inherit
_BASE_ENV = dict(os.environ)

_HEAD = r"""
import sys, time
import ray
from verl_lite.trainer.ray_start import LOCAL_SYSTEM_CONFIG

ray.init(address="local", include_dashboard=False, logging_level="ERROR", _system_config=dict(LOCAL_SYSTEM_CONFIG))
total = ray.cluster_resources().get("CPU", 0)
print(ray.get_runtime_context().gcs_address, flush=True)
for _ in sys.stdin:  # one line per run to come: answer when every CPU is free again
    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU", 0) < total and time.monotonic() < deadline:
        time.sleep(0.05)
    print("idle" if ray.available_resources().get("CPU", 0) >= total else "busy", flush=True)
ray.shutdown()
"""

_head: subprocess.Popen | None = None
_address: str | None = None


def _start() -> None:
    global _head, _address
    _head = subprocess.Popen(
        [sys.executable, "-c", _HEAD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        # token authentication off, as in a cluster `ray start` makes (a new local ray.init() turns it
        # on, and a run joining by address would need the token)
        env={**_BASE_ENV, "RAY_AUTH_MODE": "disabled"},
    )
    _address = _head.stdout.readline().strip()
    if _head.poll() is not None or not _address:
        raise RuntimeError(f"the tests' shared Ray head did not start (exit {_head.poll()})")


def _stop() -> None:
    global _head, _address
    if _head is not None:
        try:
            _head.stdin.close()  # the head shuts its Ray down on end of input
            _head.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            _head.kill()
    _head, _address = None, None


atexit.register(_stop)


def address() -> str:
    """The shared cluster's address, once every CPU of it is free (started on first use)."""
    if _head is None or _head.poll() is not None:
        _start()
    _head.stdin.write("next\n")
    _head.stdin.flush()
    if _head.stdout.readline().strip() != "idle":  # a run left workers behind: a fresh cluster
        _stop()
        _start()
    return _address


def joined_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with RAY_ADDRESS set to the shared cluster: the run joins it instead of starting Ray."""
    return {**env, "RAY_ADDRESS": address()}
