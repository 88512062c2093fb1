"""Multi-node Ray on a simulated 2-node cluster (`ray.cluster_utils.Cluster`, 1 CPU per node).

One resource pool of nnodes=2 x 1 worker puts its ranks on different nodes and they form one gloo
group; the trainer run against that cluster (trainer.nnodes=2, n_gpus_per_node=1) logs the same
metrics as a local nnodes=1, n_gpus_per_node=2 run, timing aside.
"""

import subprocess
import sys
import textwrap

import pytest

from tests.test_main_ppo import NONDETERMINISTIC, SMALL, read_metrics, run_cli

pytestmark = pytest.mark.slow

OVERRIDES = [o for o in SMALL if not o.startswith("trainer.n_gpus_per_node")] + [
    "trainer.val_before_train=False"
]

GROUP_SCRIPT = textwrap.dedent(
    """
    import os, sys, ray, torch, torch.distributed as dist
    from verl_lite.single_controller import RayResourcePool, RayWorkerGroup
    from verl_lite.single_controller.worker import Worker

    class SumWorker(Worker):
        def rank_sum(self):
            self.init_distributed(60)
            t = torch.tensor([float(self.rank + 1)])
            dist.all_reduce(t)
            return t.item()

        def launch_env(self):
            return " ".join(os.environ[k] for k in ("RANK", "NODE_RANK", "LOCAL_WORLD_SIZE", "LOCAL_RANK"))

    ray.init(address=sys.argv[1])
    pool = RayResourcePool(2, 1, use_gpu=False)
    group = RayWorkerGroup(pool, SumWorker)
    print("NODES", *group.node_ids())  # a group call first: the ranks get the rendezvous address
    sums = ray.get([w.rank_sum.remote() for w in group.workers])
    print("SUMS", *sums)
    print("ENVS", *[e.replace(" ", ",") for e in ray.get([w.launch_env.remote() for w in group.workers])])
    group.shutdown()
    pool.release()
    """
)


@pytest.fixture(scope="module")
def two_node_cluster():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        yield cluster.address
    finally:
        cluster.shutdown()


def test_one_group_spans_both_nodes(two_node_cluster):
    proc = subprocess.run(
        [sys.executable, "-c", GROUP_SCRIPT, two_node_cluster], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = {
        line.split()[0]: line.split()[1:]
        for line in proc.stdout.splitlines()
        if line[:5] in ("NODES", "SUMS ", "ENVS ")
    }
    assert len(set(lines["NODES"])) == 2, lines  # rank 0 and rank 1 on different nodes
    assert lines["SUMS"] == ["3.0", "3.0"]  # one gloo group across the nodes: 1 + 2 on both ranks
    # RANK, NODE_RANK, LOCAL_WORLD_SIZE, LOCAL_RANK (the device ordinal: 0 without a GPU)
    assert lines["ENVS"] == ["0,0,1,0", "1,1,1,0"]


def test_training_on_two_nodes_matches_one_node(two_node_cluster, tmp_path, monkeypatch):
    local = run_cli(tmp_path / "local", *OVERRIDES, "trainer.nnodes=1", "trainer.n_gpus_per_node=2")
    assert local.returncode == 0, local.stderr[-4000:]
    monkeypatch.setenv("RAY_ADDRESS", two_node_cluster)
    multi = run_cli(tmp_path / "multi", *OVERRIDES, "trainer.nnodes=2", "trainer.n_gpus_per_node=1")
    assert multi.returncode == 0, (multi.stdout + multi.stderr)[-8000:]
    assert "2 x actor_rollout on 2 node(s)" in multi.stdout + multi.stderr
    assert "started a local Ray instance" not in multi.stdout + multi.stderr

    def stable(rows):
        return [{k: v for k, v in r.items() if not k.startswith(NONDETERMINISTIC)} for r in rows]

    one, two = stable(read_metrics(tmp_path / "local")), stable(read_metrics(tmp_path / "multi"))
    assert [r["step"] for r in two] == [1, 2]
    assert one == two
    assert two[1]["actor/grad_norm"] > 0 and "val-core/verl_lite/arith/reward/mean@1" in two[1]
