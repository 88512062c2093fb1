"""A CPU worker runs one torch/OpenMP thread whatever the node's CPUs (utils/device.worker_num_threads),
unless OMP_NUM_THREADS where the run starts asks for more; a bad OMP_NUM_THREADS stops start-up in
one line. The workers are real Ray actors on the tests' 2-CPU local Ray: one worker there holds a
bundle of both CPUs, where a share-of-the-node rule would give it two threads. They run at the
driver's priority, not at Ray's default nice 15 (trainer/ray_start.py)."""

import os

import pytest
import torch

from verl_lite.config.compose import load_config
from verl_lite.config.errors import ConfigError
from verl_lite.preflight import prepare
from verl_lite.single_controller import Dispatch, RayResourcePool, RayWorkerGroup, Worker, register


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
