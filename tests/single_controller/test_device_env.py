"""The environment each rank's vLLM engine and torch see, on every rank of every node.

Ray shows a GPU worker only the GPU(s) it assigned, through CUDA_VISIBLE_DEVICES; vLLM's external
launcher reads LOCAL_RANK as a *logical* device id, maps it through that list and asserts it is
below the visible device count (vllm/v1/worker/gpu_worker.py, init_device). These tests build each
rank's environment the way the group (rank_env) and the worker (device_env) do for simulated
clusters, then resolve LOCAL_RANK with vLLM's own mapping code (its Platform base class, with the
CUDA platform's visibility variable) and check that vLLM and torch land on the GPU Ray assigned.
"""

import os

import pytest

from verl_lite.rollout.engine_state import prepare_engine_env
from verl_lite.single_controller.ray_group import rank_env
from verl_lite.single_controller.worker import device_env
from verl_lite.utils import device as dev

interface = pytest.importorskip("vllm.platforms.interface", reason="vLLM's device mapping (make install)")


class CudaLikePlatform(interface.Platform):
    """vLLM's device-id mapping as its CUDA platform runs it (integer ids: the NVML lookup is only
    for UUIDs), importable on a CPU-only machine."""

    device_control_env_var = dev.VISIBLE_DEVICES_ENV


def cluster(nnodes: int, gpus_per_node: int, noset: bool, node_visible: str | None = None):
    """(rank, node, assigned gpu id, CUDA_VISIBLE_DEVICES of the process) for every rank, as Ray
    places a group: bundle i of node k holds one GPU. Ray narrows the variable to that GPU unless
    RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES is set (then the node's value, or unset, stays)."""
    node_ids = node_visible.split(",") if node_visible else [str(i) for i in range(gpus_per_node)]
    for node in range(nnodes):
        for i in range(gpus_per_node):
            gpu = node_ids[i]
            yield node * gpus_per_node + i, node, gpu, (node_visible if noset else gpu)


def resolve(env: dict[str, str], visible: str | None, gpus_per_node: int, monkeypatch) -> tuple[int, int]:
    """(the physical GPU vLLM's worker would use, the number of devices its process sees), asserting
    what gpu_worker.init_device asserts."""
    if visible is None:
        monkeypatch.delenv(dev.VISIBLE_DEVICES_ENV, raising=False)
    else:
        monkeypatch.setenv(dev.VISIBLE_DEVICES_ENV, visible)
    local_rank = int(env["LOCAL_RANK"])
    num_visible = len(visible.split(",")) if visible else gpus_per_node
    assert local_rank < num_visible, f"vLLM: local rank {local_rank} out of bounds for {num_visible} devices"
    ordinal = CudaLikePlatform.logical_device_id_to_visible_device_id(local_rank)
    assert ordinal == local_rank, "torch computes on the ordinal vLLM picks"
    return CudaLikePlatform.device_id_to_physical_device_id(local_rank), num_visible


@pytest.mark.parametrize(
    "noset, node_visible",
    [(False, None), (True, None), (True, "4,5,6,7")],
    ids=["ray-narrows-visibility", "all-visible", "node-restricted-all-visible"],
)
def test_every_rank_on_every_node_gets_the_gpu_ray_assigned(noset, node_visible, monkeypatch):
    nnodes, per_node = 2, 4
    seen = set()
    for rank, node, gpu, visible in cluster(nnodes, per_node, noset, node_visible):
        env = {**rank_env(rank, nnodes * per_node, per_node), **device_env([gpu], visible)}
        assert (env["RANK"], env["NODE_RANK"], env["WORLD_SIZE"]) == (str(rank), str(node), "8")
        physical, _ = resolve(env, visible, per_node, monkeypatch)
        assert physical == int(gpu), f"rank {rank} would run on GPU {physical}, Ray gave it {gpu}"
        seen.add((node, physical))
    assert len(seen) == nnodes * per_node, "no two ranks share a GPU"


def test_the_node_local_index_as_local_rank_fails_for_all_but_the_first_rank_per_node(monkeypatch):
    """What the group used to set (LOCAL_RANK = bundle index): vLLM refuses ranks 1..3 of a node."""
    failed = []
    for rank, _, _, visible in cluster(2, 4, noset=False):
        try:
            resolve({"LOCAL_RANK": str(rank % 4)}, visible, 4, monkeypatch)
        except AssertionError:
            failed.append(rank)
    assert failed == [1, 2, 3, 5, 6, 7]


def test_cpu_workers_and_hidden_devices():
    assert device_env([], None) == {"LOCAL_RANK": "0"}  # a CPU worker: nothing assigned
    assert device_env([], "0,1") == {"LOCAL_RANK": "0"}
    with pytest.raises(RuntimeError, match="hides it"):
        device_env(["3"], "0,1")


def test_the_rollout_gives_vllm_the_device_torch_computes_on(monkeypatch):
    """Whatever LOCAL_RANK a launcher left (a node-local index, say), the engine sees the ordinal of
    the device this process computes on: 0 here (CPU), torch.cuda.current_device() on a GPU."""
    monkeypatch.setattr(os, "environ", {**os.environ, "LOCAL_RANK": "3"})  # a copy: nothing leaks
    prepare_engine_env()
    assert os.environ["LOCAL_RANK"] == str(dev.local_ordinal()) == "0"
