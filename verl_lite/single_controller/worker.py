"""Worker: the base of every Ray worker actor, one per data-parallel rank.

The group passes RANK, WORLD_SIZE, NODE_RANK and LOCAL_WORLD_SIZE as environment variables, and
MASTER_ADDR and MASTER_PORT (rank 0's choice) by `set_master_addr_port` before anything else runs. The worker adds LOCAL_RANK itself: the ordinal of its device among the
devices visible to its process, which is what torch (`set_device`, DeviceMesh) and vLLM's external
launcher (it asserts LOCAL_RANK < the visible device count) read it as. Ray shows each GPU worker
only its own GPU, so that is 0 on every rank of every node, not the rank's index on its node.
The worker then routes its output (utils/logs.py), sets its thread count and initialises
torch.distributed with the device's backend and a bounded timeout (a collective that hangs becomes an error instead of a silent stall).
"""

from __future__ import annotations

import datetime
import os
import socket

import ray
import torch
import torch.distributed as dist

from verl_lite.utils import device as dev
from verl_lite.utils import import_gc
from verl_lite.utils.logs import route_worker_output


def device_env(assigned_gpu_ids: list[str], visible_devices: str | None) -> dict[str, str]:
    """LOCAL_RANK for a worker Ray assigned `assigned_gpu_ids` (none without GPUs) while the
    process sees `visible_devices` (the device-visibility variable Ray set, or None)."""
    return {"LOCAL_RANK": str(dev.visible_ordinal(assigned_gpu_ids, visible_devices))}


class Worker:
    def __init__(self):
        import_gc.resume()  # the worker's imports are done (utils/import_gc.py)
        self.log_file = route_worker_output()  # before anything prints: the output's place (utils/logs.py)
        # outside a Ray actor (a test constructing a worker directly) nothing is assigned; asking
        # the runtime context there would start a local Ray
        assigned = ray.get_runtime_context().get_accelerator_ids()["GPU"] if ray.is_initialized() else []
        os.environ.update(device_env(assigned, os.environ.get(dev.VISIBLE_DEVICES_ENV)))
        self.rank = int(os.environ["RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        torch.set_num_threads(int(os.environ.get("VERL_LITE_NUM_THREADS", "1")))

    def init_distributed(self, timeout_s: int) -> None:
        if dist.is_initialized():
            return
        dev.set_local_device()
        dist.init_process_group(
            backend=dev.dist_backend(),
            rank=self.rank,
            world_size=self.world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )

    @staticmethod
    def set_master_addr_port(addr: str, port: int) -> None:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = addr, str(port)

    @staticmethod
    def get_node_id() -> str:
        """The Ray node this worker runs on (multi-node placement shows in the start-up log)."""
        return ray.get_runtime_context().get_node_id()

    @staticmethod
    def get_master_addr_port() -> tuple[str, int]:
        """This node's IP and a free port, for rank 0 to host the rendezvous."""
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port
