"""A CPU worker runs one torch/OpenMP thread whatever the node's CPUs (utils/device.worker_num_threads),
unless OMP_NUM_THREADS where the run starts asks for more; a bad OMP_NUM_THREADS stops start-up in
one line. The workers are real Ray actors on the tests' 2-CPU local Ray: one worker there holds a
bundle of both CPUs, where a share-of-the-node rule would give it two threads. They run at the
driver's priority, not at Ray's default nice 15 (trainer/ray_start.py)."""

import os
import subprocess
import sys

import pytest
import torch

from verl_lite.config.compose import load_config
from verl_lite.config.errors import ConfigError
from verl_lite.preflight import prepare
from verl_lite.single_controller import Dispatch, RayResourcePool, RayWorkerGroup, Worker, register
from verl_lite.single_controller.ray_group import worker_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ThreadsWorker(Worker):
    @register(Dispatch.ONE_TO_ALL)
    def threads(self) -> tuple[int, str]:
        return torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS", "")

    @register(Dispatch.ONE_TO_ALL)
    def niceness(self) -> int:
        return os.nice(0)


def worker_threads(method: str = "threads") -> list:
    pool = RayResourcePool(nnodes=1, n_workers_per_node=1, use_gpu=False)
    group = RayWorkerGroup(pool, ThreadsWorker, name="threads")
    try:
        return getattr(group, method)()
    finally:
        group.shutdown()
        pool.release()


def test_a_cpu_worker_gets_one_thread_on_a_node_with_more(ray_local, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert ray_local.cluster_resources()["CPU"] == 2
    assert worker_threads() == [(1, "1")]


def test_omp_num_threads_where_the_run_starts_sets_every_workers_count(ray_local, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert worker_threads() == [(2, "2")]


def test_workers_of_a_local_ray_run_at_the_drivers_priority(ray_local):
    """Ray's default worker niceness is 15 (an increment over the raylet's); the system config a
    run's local Ray starts with sets 0 (trainer/ray_start.py), which the tests' Ray shares: the
    workers keep the niceness of the process that started Ray."""
    assert worker_threads("niceness") == [os.nice(0)]


def test_a_bad_omp_num_threads_stops_start_up_in_one_line(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "many")
    with pytest.raises(ConfigError) as info:
        prepare(load_config([], "demo"), num_gpus=0)
    assert info.value.problems == [
        "OMP_NUM_THREADS='many' is not a positive whole number: set it to the threads each worker should "
        "use (e.g. OMP_NUM_THREADS=4) or unset it"
    ]


def test_the_runs_env_vars_win_over_verl_lites_worker_defaults(ray_local):
    """An actor's own env_vars override the job's in Ray: worker_env takes each of its variables
    from what the run sets (run_environ: the shell and ray_init.runtime_env.env_vars) first."""
    pool = RayResourcePool(nnodes=1, n_workers_per_node=1, use_gpu=False)
    try:
        ours = worker_env(pool, {})
        theirs = worker_env(pool, {"OMP_NUM_THREADS": "2", "TOKENIZERS_PARALLELISM": "true"})
    finally:
        pool.release()
    assert (ours["OMP_NUM_THREADS"], ours["VERL_LITE_NUM_THREADS"], ours["TOKENIZERS_PARALLELISM"]) == (
        "1",
        "1",
        "false",
    )
    assert (theirs["OMP_NUM_THREADS"], theirs["VERL_LITE_NUM_THREADS"], theirs["TOKENIZERS_PARALLELISM"]) == (
        "2",
        "2",
        "true",
    )


RUNTIME_ENV_RUN = """
import sys
from verl_lite.config.compose import load_config
from verl_lite.single_controller import RayResourcePool, RayWorkerGroup
from verl_lite.trainer.ray_start import start_ray
from tests.single_controller.test_worker_threads import ThreadsWorker

start_ray(load_config(sys.argv[1:], "demo"))
pool = RayResourcePool(nnodes=1, n_workers_per_node=1, use_gpu=False)
group = RayWorkerGroup(pool, ThreadsWorker, name="threads")
print("THREADS", group.threads()[0])
"""


def test_omp_num_threads_in_ray_inits_runtime_env_sets_the_workers_count(tmp_path):
    """The whole path, in a Ray of its own (the tests' shared Ray has no such env_vars): main_ppo's
    start_ray passes the runtime_env, and the worker runs the threads it names, not verl_lite's one."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "RAY_ADDRESS")}
    env["PYTHONPATH"] = REPO
    overrides = [
        "ray_kwargs.ray_init.num_cpus=2",
        '+ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS="2"',
    ]
    proc = subprocess.run(
        [sys.executable, "-c", RUNTIME_ENV_RUN, *overrides],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("THREADS ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    assert lines[-1] == "THREADS (2, '2')"
