"""The machine's start-up steps (registered in verl_lite/preflight.py): the workers fit the nodes
(single_controller/capacity.py), and OMP_NUM_THREADS, when set, is a thread count for them. A
local Ray's one node is known before Ray starts; a cluster joined by address is known only once
joined, and is checked then, before any worker starts."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from verl_lite.single_controller.capacity import capacity_problems, cluster_nodes, local_node
from verl_lite.utils import device as dev

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig


def joins_cluster(cfg: PPOTrainerConfig) -> bool:
    return bool(cfg.ray_kwargs.ray_init.address or os.environ.get("RAY_ADDRESS"))


def check_machine(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """The workers' thread count (utils/device.worker_num_threads), and a local Ray's node: this
    machine's CPUs (or ray_init.num_cpus) and visible GPUs."""
    try:
        dev.requested_threads()
        problems = []
    except ValueError as e:
        problems = [str(e)]
    if joins_cluster(cfg):
        return problems
    t = cfg.trainer
    node = local_node(cfg.ray_kwargs.ray_init.num_cpus, run.num_gpus)
    return problems + capacity_problems(t.nnodes, t.n_gpus_per_node, run.use_gpu, [node], local=True)


def check_cluster(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """The live nodes of the Ray cluster this process is connected to."""
    t = cfg.trainer
    return capacity_problems(t.nnodes, t.n_gpus_per_node, run.use_gpu, cluster_nodes(), local=False)
