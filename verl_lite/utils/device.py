"""The one module that names CUDA, NCCL, gloo and pinned memory.

Everything else asks this module which device, backend and memory features exist, so the same code
runs on a CPU-only machine (gloo, fp32) and on GPUs (nccl, bf16) without `if cuda` spread around.
"""

from __future__ import annotations

import contextlib
import os

import torch


def is_cuda_available() -> bool:
    return torch.cuda.is_available()


def has_accelerator() -> bool:
    """Whether this process computes on an accelerator (a GPU) rather than on the host: the question
    other modules ask, in words that do not name the accelerator."""
    return is_cuda_available()


def device_type() -> str:
    """'cuda' when a GPU is visible to this process, else 'cpu'."""
    return "cuda" if is_cuda_available() else "cpu"


DEVICE_CHOICES = ("auto", "cpu", "cuda")  # trainer.device
HOST_BACKEND = "gloo"  # the collective backend for host tensors, on every machine


def wants_accelerator(device: str) -> bool:
    """trainer.device: whether workers use GPUs (`cuda`; `auto` when one is visible here)."""
    return device == "cuda" or (device == "auto" and num_visible_gpus() > 0)


def requires_accelerator(device: str) -> bool:
    """trainer.device names the accelerator explicitly (then a machine without one is an error)."""
    return device == "cuda"


def dist_backend() -> str:
    """nccl for device tensors; with CUDA also gloo for host tensors, which CPU offload needs
    (FSDP2's CPUOffloadPolicy clips and reduces host-resident grads)."""
    return f"cpu:{HOST_BACKEND},cuda:nccl" if is_cuda_available() else HOST_BACKEND


def host_backend_available() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_gloo_available()


def local_device() -> torch.device:
    """The device this rank computes on (Ray gives each GPU worker exactly one visible GPU)."""
    if is_cuda_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"  # what Ray narrows to a GPU worker's own device(s)


def visible_ordinal(assigned_ids: list[str], visible_devices: str | None) -> int:
    """The ordinal, among the devices this process sees, of the first device assigned to it.

    Ray normally sets CUDA_VISIBLE_DEVICES to a GPU worker's own device(s), so this is 0 on every
    rank; with RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES (or any launcher that leaves every device
    visible) it is the assigned device's position in the visible list (its id when unset).
    No assigned device (a CPU worker): 0."""
    if not assigned_ids:
        return 0
    if not visible_devices:
        return int(assigned_ids[0])
    visible = [v.strip() for v in visible_devices.split(",")]
    if assigned_ids[0] not in visible:
        raise RuntimeError(
            f"device {assigned_ids[0]} was assigned to this worker but {VISIBLE_DEVICES_ENV}="
            f"{visible_devices} hides it; leave {VISIBLE_DEVICES_ENV} to Ray"
        )
    return visible.index(assigned_ids[0])


def set_local_device() -> None:
    """Compute on device LOCAL_RANK (an ordinal among the visible devices; 0 when unset)."""
    if is_cuda_available():
        ordinal, count = int(os.environ.get("LOCAL_RANK", 0)), torch.cuda.device_count()
        if ordinal >= count:
            raise RuntimeError(
                f"LOCAL_RANK={ordinal} but this process sees {count} device(s) "
                f"({VISIBLE_DEVICES_ENV}={os.environ.get(VISIBLE_DEVICES_ENV)}): LOCAL_RANK must be "
                "an ordinal among the visible devices"
            )
        torch.cuda.set_device(ordinal)


def local_ordinal() -> int:
    """This process's device as an ordinal among its visible devices (0 on a CPU-only machine):
    the LOCAL_RANK vLLM's external launcher must see to pick the device torch computes on."""
    return torch.cuda.current_device() if is_cuda_available() else 0


def empty(shape, dtype: torch.dtype, device: torch.device, stride=None, pinned: bool = False) -> torch.Tensor:
    """New storage on `device` (with `stride` when given); `pinned` asks for page-locked host memory,
    which the accelerator copies from asynchronously (ignored where no accelerator exists)."""
    pin = pinned and device.type == "cpu" and can_pin_memory()
    if stride is not None:
        return torch.empty_strided(shape, stride, dtype=dtype, device=device, pin_memory=pin)
    return torch.empty(shape, dtype=dtype, device=device, pin_memory=pin)


def cpu_offload_policy():
    """FSDP2's CPUOffloadPolicy, with pinned host shards where an accelerator copies from them."""
    from torch.distributed.fsdp import CPUOffloadPolicy

    return CPUOffloadPolicy(pin_memory=can_pin_memory())


def can_pin_memory() -> bool:
    """Pinned host memory needs a CUDA driver; on a CPU-only machine pin_memory() raises."""
    return is_cuda_available()


def num_visible_gpus() -> int:
    return torch.cuda.device_count() if is_cuda_available() else 0


def synchronize() -> None:
    if is_cuda_available():
        torch.cuda.synchronize()


def empty_cache() -> None:
    if is_cuda_available():
        torch.cuda.empty_cache()


def get_rng_state() -> list[torch.Tensor]:
    """The device generators' states (one per visible GPU; none on CPU), for checkpoints."""
    return torch.cuda.get_rng_state_all() if is_cuda_available() else []


def set_rng_state(states: list[torch.Tensor]) -> None:
    if is_cuda_available() and states:
        torch.cuda.set_rng_state_all(states)


def memory_stats_gb() -> dict[str, float]:
    """Peak device memory since the last reset; empty on CPU, where host memory is reported instead."""
    if not is_cuda_available():
        return {}
    gb = 1024**3
    return {
        "max_memory_allocated_gb": torch.cuda.max_memory_allocated() / gb,
        "max_memory_reserved_gb": torch.cuda.max_memory_reserved() / gb,
    }


def pinned_host_peak_bytes() -> int:
    """Peak bytes the caching host allocator held (pinned blocks, each rounded up to a power of two,
    in use or cached) since the last reset; 0 without an accelerator."""
    if not is_cuda_available():
        return 0
    return int(torch.cuda.host_memory_stats().get("allocated_bytes.peak", 0))


def reset_peak_pinned_host() -> None:
    if is_cuda_available():
        torch.cuda.reset_peak_host_memory_stats()


def reset_peak_memory() -> None:
    if is_cuda_available():
        torch.cuda.reset_peak_memory_stats()


def ray_worker_resources(num_workers_per_node: int, cpus_per_node: float, use_gpu: bool) -> dict[str, float]:
    """Resources of one worker's placement-group bundle.

    With GPUs every worker holds one; without, the node's CPUs are shared out as Ray fractions
    (Ray accepts fractions below 1 only, so a share above 1 is rounded down to a whole CPU).
    """
    if use_gpu:
        return {"GPU": 1, "CPU": 1}
    share = cpus_per_node / num_workers_per_node
    share = float(int(share)) if share >= 1 else round(share, 4)
    return {"CPU": max(share, 0.0001)}


def describe_devices() -> list[tuple[str, str]]:
    """(name, what it is and its free memory) for every visible accelerator (none on CPU)."""
    out = []
    for i in range(num_visible_gpus()):
        free, total = torch.cuda.mem_get_info(i)
        name = torch.cuda.get_device_name(i)
        out.append((f"cuda:{i}", f"{name}, {free / 2**30:.1f} of {total / 2**30:.1f} GiB free"))
    return out


def pinned_memory_problem() -> str | None:
    """Why page-locked host memory cannot be had here (None when it works)."""
    try:
        torch.empty(1, pin_memory=True)
    except RuntimeError as e:
        return str(e)
    return None


def device_memory_total_gb() -> float:
    """Memory of this process's device: the GPU's, or on a CPU-only machine the host's available."""
    if is_cuda_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / 1024**3
    import psutil

    return psutil.virtual_memory().available / 1024**3


def memory_outside_torch_gb() -> float | None:
    """Device memory in use that torch's caching allocator does not hold: the CUDA context, NCCL's
    buffers, cuBLAS workspaces (and other processes' memory on a shared device). None on CPU."""
    if not is_cuda_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return (total - free - torch.cuda.memory_reserved()) / 1024**3


def device_name() -> str:
    """The device's product name ('cpu' without an accelerator)."""
    return torch.cuda.get_device_name() if is_cuda_available() else "cpu"


def cap_device_memory(gb: float) -> None:
    """Let this process allocate at most `gb` of its device (to stand in for a smaller card); no-op on CPU."""
    if is_cuda_available():
        torch.cuda.set_per_process_memory_fraction(min(1.0, gb / device_memory_total_gb()))


def device_utilization() -> float | None:
    """GPU busy percent over NVML's last sample period (None without CUDA or NVML)."""
    if not is_cuda_available():
        return None
    try:
        return float(torch.cuda.utilization())
    except Exception:  # pynvml missing or NVML unavailable
        return None


def measure_link_gbps(num_bytes: int = 256 * 1024**2) -> float:
    """Host->device copy bandwidth of one pinned buffer (host memcpy bandwidth without CUDA)."""
    import time

    host = torch.empty(num_bytes, dtype=torch.uint8, pin_memory=can_pin_memory())
    target = local_device()
    host.to(target, copy=True)  # warm-up
    synchronize()
    start = time.perf_counter()
    host.to(target, copy=True)
    synchronize()
    return num_bytes / 1024**3 / (time.perf_counter() - start)


def fork_rng():
    """A context that restores the host generator and this process's device generator afterwards."""
    return torch.random.fork_rng(devices=[torch.cuda.current_device()] if is_cuda_available() else [])


def device_rng_states() -> list[torch.Tensor] | None:
    """Every visible GPU's RNG state (None without CUDA), to restore after code that reseeds."""
    return torch.cuda.get_rng_state_all() if is_cuda_available() else None


def set_device_rng_states(states: list[torch.Tensor] | None) -> None:
    if states is not None:
        torch.cuda.set_rng_state_all(states)


# --- side streams and events (activation offload); no-ops without CUDA, where copies are synchronous ---
def new_stream():
    """A side stream for copies that overlap compute (None without CUDA)."""
    return torch.cuda.Stream() if is_cuda_available() else None


def on_stream(stream):
    """Run the enclosed ops on `stream` (the current stream when None)."""
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def stream_wait(waiter, waitee) -> None:
    """Work queued on `waiter` from now on starts after what `waitee` has queued so far (None: the
    current stream; nothing to order without CUDA)."""
    if not is_cuda_available() or waiter is waitee:
        return
    current = torch.cuda.current_stream()
    (waiter or current).wait_stream(waitee or current)


def mark_used_on(tensor: torch.Tensor, stream) -> None:
    """Tell the caching allocator `tensor` is in use on `stream` (None: the current stream), so its memory
    is not reused before that stream's queued work is done."""
    if is_cuda_available() and tensor.is_cuda:
        tensor.record_stream(stream if stream is not None else torch.cuda.current_stream())


def timing_event(stream=None):
    """A recorded timing event on `stream` (None without CUDA); `elapsed_s(a, b)` after a sync."""
    if not is_cuda_available():
        return None
    event = torch.cuda.Event(enable_timing=True)
    event.record(stream)
    return event


def elapsed_s(start, stop) -> float:
    stop.synchronize()
    return start.elapsed_time(stop) / 1000.0
