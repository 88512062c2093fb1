"""The machine's start-up steps (registered in verl_lite/preflight.py): the workers fit the nodes
(single_controller/capacity.py), and OMP_NUM_THREADS, when set, is a thread count for them. A
local Ray's one node is known before Ray starts; a cluster joined by address is known only once
joined, and is checked then, before any worker starts. Before that, the address must answer:
ray.init waits for a GCS that is not there for minutes (it was seen hanging until killed)."""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

from verl_lite.single_controller.capacity import capacity_problems, cluster_nodes, local_node
from verl_lite.utils import device as dev

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig


def joins_cluster(cfg: PPOTrainerConfig) -> bool:
    return bool(cfg.ray_kwargs.ray_init.address or os.environ.get("RAY_ADDRESS"))


PROBE_S = 5.0  # how long a cluster's address has to answer a TCP connection


def cluster_address(cfg: PPOTrainerConfig) -> tuple[str, str] | None:
    """(the key or variable that names it, the address) of the cluster the run joins, or None."""
    if cfg.ray_kwargs.ray_init.address:
        return "ray_kwargs.ray_init.address", cfg.ray_kwargs.ray_init.address
    if os.environ.get("RAY_ADDRESS"):
        return "RAY_ADDRESS", os.environ["RAY_ADDRESS"]
    return None


def _host_port(address: str) -> tuple[str, int] | str:
    """Where to probe `address` ("auto": the cluster `ray start` recorded here), or why not."""
    if address == "auto":
        from ray._private.services import canonicalize_bootstrap_address

        try:
            found = canonicalize_bootstrap_address("auto")
        except Exception as e:  # ConnectionError: no cluster recorded on this machine
            return f"finds no running Ray cluster on this machine ({' '.join(str(e).split())[:200]})"
        if not found:
            return "finds no running Ray cluster on this machine"
        address = found
    client = address.startswith("ray://")
    rest = address.removeprefix("ray://")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        return (host or rest, 10001) if client and rest and not port.isdigit() else "is not host:port"
    return host.strip("[]"), int(port)


def address_problem(cfg: PPOTrainerConfig) -> str | None:
    """The cluster address the run joins does not answer (or cannot), in one line; None if it does."""
    import ray

    named = cluster_address(cfg)
    if named is None or ray.is_initialized():  # connected already: the run uses that connection
        return None
    key, address = named
    if address == "local":  # ray.init starts a new local Ray: there is nothing to reach
        return None
    target = _host_port(address)
    fix = "start the cluster there (`ray start --head`), fix the address, or unset it to start a local Ray"
    if isinstance(target, str):
        return f"{key}={address!r} {target}; {fix}"
    try:
        with socket.create_connection(target, timeout=PROBE_S):
            return None
    except OSError as e:
        why = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        return f"{key}={address!r}: nothing answers at {target[0]}:{target[1]} ({why} within {PROBE_S:.0f} s); {fix}"


def check_machine(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """The workers' thread count (utils/device.worker_num_threads), and a local Ray's node: this
    machine's CPUs (or ray_init.num_cpus) and visible GPUs."""
    try:
        dev.requested_threads()
        problems = []
    except ValueError as e:
        problems = [str(e)]
    if joins_cluster(cfg):
        unreachable = address_problem(cfg)
        return problems + ([unreachable] if unreachable else [])
    t = cfg.trainer
    node = local_node(cfg.ray_kwargs.ray_init.num_cpus, run.num_gpus)
    return problems + capacity_problems(t.nnodes, t.n_gpus_per_node, run.use_gpu, [node], local=True)


def check_cluster(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """The live nodes of the Ray cluster this process is connected to."""
    t = cfg.trainer
    return capacity_problems(t.nnodes, t.n_gpus_per_node, run.use_gpu, cluster_nodes(), local=False)
