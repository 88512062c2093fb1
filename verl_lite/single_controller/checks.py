"""The machine's start-up steps (registered in verl_lite/preflight.py): the workers fit the nodes
(single_controller/capacity.py). A local Ray's one node is known before Ray starts; a cluster
joined by address is known only once joined, and is checked then, before any worker starts."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from verl_lite.single_controller.capacity import capacity_problems, cluster_nodes, local_node

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig


def joins_cluster(cfg: PPOTrainerConfig) -> bool:
    return bool(cfg.ray_kwargs.ray_init.address or os.environ.get("RAY_ADDRESS"))


def check_machine(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """A local Ray's node: this machine's CPUs (or ray_init.num_cpus) and visible GPUs."""
    if joins_cluster(cfg):
        return []
    t = cfg.trainer
    node = local_node(cfg.ray_kwargs.ray_init.num_cpus, run.num_gpus)
    return capacity_problems(t.nnodes, t.n_gpus_per_node, run.use_gpu, [node], local=True)


def check_cluster(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """The live nodes of the Ray cluster this process is connected to."""
    t = cfg.trainer
    return capacity_problems(t.nnodes, t.n_gpus_per_node, run.use_gpu, cluster_nodes(), local=False)
