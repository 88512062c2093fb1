"""Does the cluster have room for the workers asked for? Checked before any worker starts.

`trainer.nnodes x trainer.n_gpus_per_node` workers need that many nodes, each with that many GPUs
(or, on a CPU-only machine, that many CPUs: each worker is a process computing on its share of the
cores, and more processes than cores only adds memory until the machine runs out). Ray would
otherwise wait for resources that never come, or start every worker and let memory run out.

For a local Ray the machine is known before Ray starts (`local_node`); for a cluster joined by
address the nodes are read right after connecting, before the workers start (`cluster_nodes`).
"""

from __future__ import annotations

import os


def local_node(num_cpus: int | None, num_gpus: int) -> dict[str, float]:
    """What a local Ray started by this process offers: the CPUs this process may use, its GPUs."""
    cpus = num_cpus if num_cpus is not None else len(os.sched_getaffinity(0))
    return {"CPU": float(cpus), "GPU": float(num_gpus)}


def cluster_nodes() -> list[dict[str, float]]:
    """The resources of every live node of the Ray cluster this process is connected to."""
    import ray

    return [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]


def capacity_problems(nnodes: int, per_node: int, use_gpu: bool, nodes: list[dict], local: bool) -> list[str]:
    """One line when `nnodes` nodes with room for `per_node` workers each are not among `nodes`."""
    unit = "GPU" if use_gpu else "CPU"
    ask = f"trainer.nnodes={nnodes} x trainer.n_gpus_per_node={per_node}"
    if local and nnodes > 1:
        return [
            f"{ask}: a local Ray has one node; to use {nnodes} nodes join a cluster "
            "(ray_kwargs.ray_init.address or RAY_ADDRESS, docs/slurm.md), or set trainer.nnodes=1"
        ]
    have = sorted((int(n.get(unit, 0)) for n in nodes), reverse=True)
    fitting = sum(1 for h in have if h >= per_node)
    if fitting >= nnodes:
        return []
    where = "this machine has" if local else f"the cluster's {len(nodes)} node(s) have"
    fix = (
        f"set trainer.n_gpus_per_node <= {have[0] if have else 0}"
        if nnodes == 1
        else "add nodes or lower them"
    )
    what = "GPUs" if use_gpu else "CPUs (one worker process per core)"
    return [f"{ask} needs {per_node} {what} on each of {nnodes} node(s); {where} {have} {unit}s; {fix}"]
