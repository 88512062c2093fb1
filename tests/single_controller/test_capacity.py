"""Workers against the nodes a Ray cluster (or this machine) offers."""

from verl_lite.single_controller.capacity import capacity_problems, local_node


def test_local_machine_cpus_and_gpus():
    node = {"CPU": 2.0, "GPU": 0.0}
    assert capacity_problems(1, 2, False, [node], local=True) == []
    [msg] = capacity_problems(1, 32, False, [node], local=True)
    assert "trainer.n_gpus_per_node=32 needs 32 CPUs" in msg and "this machine has [2] CPUs" in msg
    assert "set trainer.n_gpus_per_node <= 2" in msg
    [msg] = capacity_problems(1, 8, True, [{"CPU": 64.0, "GPU": 4.0}], local=True)
    assert "needs 8 GPUs" in msg and "[4] GPUs" in msg
    [msg] = capacity_problems(2, 1, False, [node], local=True)
    assert "a local Ray has one node" in msg
    assert local_node(3, 1) == {"CPU": 3.0, "GPU": 1.0}


def test_cluster_needs_enough_nodes_with_room():
    nodes = [{"CPU": 16.0, "GPU": 8.0}, {"CPU": 16.0, "GPU": 8.0}, {"CPU": 4.0}]  # a head without GPUs
    assert capacity_problems(2, 8, True, nodes, local=False) == []
    [msg] = capacity_problems(3, 8, True, nodes, local=False)
    assert "needs 8 GPUs on each of 3 node(s); the cluster's 3 node(s) have [8, 8, 0] GPUs" in msg
    assert capacity_problems(3, 4, False, nodes, local=False) == []
