"""Shutting a worker group down lets its processes exit normally (its own pool: the 2 CPUs of the
test Ray are free once test_dispatch.py's module-scoped group is released)."""

import os
import time

from tests.single_controller.test_dispatch import EchoWorker
from verl_lite.single_controller import RayResourcePool, RayWorkerGroup


def test_shutdown_lets_worker_processes_exit_normally(ray_local, tmp_path):
    """So that what a library holds outside the process is released (vLLM's CPU shared memory)."""
    pool = RayResourcePool(nnodes=1, n_workers_per_node=2, use_gpu=False, ready_timeout_s=60)
    try:
        wg = RayWorkerGroup(pool, EchoWorker, 0.0, name="exiting")
        wg.mark_exit(str(tmp_path))
        wg.shutdown()
    finally:
        pool.release()
    deadline = time.monotonic() + 30  # Ray reports the actors dead before their exit handlers finish
    while len(os.listdir(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sorted(os.listdir(tmp_path)) == ["exited-0", "exited-1"]
