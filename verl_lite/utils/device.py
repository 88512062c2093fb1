"""The one module that names CUDA, NCCL, gloo and pinned memory.

Everything else asks this module which device, backend and memory features exist, so the same code
runs on a CPU-only machine (gloo, fp32) and on GPUs (nccl, bf16) without `if cuda` spread around.

Pinned host memory, and why offload copies do not use `pin_memory()`: torch's caching host allocator
(ATen/core/CachingHostAllocator.h, `allocate`) rounds every pinned block up to a power of two and,
when the tensor dies, keeps the block for reuse instead of returning it. A sharded 7B model's
tensors land just above powers of two often enough that pinned copies hold ~1.9x their bytes, for
the life of the process. torch 2.13 can switch the rounding off above a size
(`PYTORCH_ALLOC_CONF=pinned_max_round_threshold_mb:T`), but a block that is not rounded must also not
be cached (`pinned_max_cached_size_mb:T`): the free list is indexed by the rounded size and hands
out any block of the bucket, so an exact-size cached block could be smaller than the request. Then
every large pinned allocation is a cudaHostAlloc and every free a cudaFreeHost (which synchronises
the device) -- for FSDP2's per-step gradient copies, each step. So the allocator is left as it is,
and the copies this project makes itself go to `HostBuffer`s: exactly sized host memory from the
ordinary CPU allocator, page-locked once with cudaHostRegister (what torch's own checkpoint stager
does, torch/cuda/_pin_memory_utils.py) and reused for every copy. What still goes through the
caching allocator, rounded and kept, and so shows in `pinned_host_bytes()`:
  - FSDP2's CPUOffloadPolicy(pin_memory=True): each sharded parameter is pinned once at wrap time
    (`.pin_memory()` in FSDPParam), and each step's first reduced gradient shard is copied into a
    new pinned block that becomes the host gradient (returned to the cache at zero_grad, reused);
  - vLLM's level-1 sleep: every weight allocation is backed up into a pinned tensor while asleep,
    and the block stays cached after wake-up (device_allocator/cumem.py); level 2 keeps no backup;
  - `to_device`'s staging of batch inputs (small).
"""

from __future__ import annotations

import contextlib
import os
import weakref

import torch

_ALIGN = 64  # bytes: every tensor carved out of a HostBuffer starts at a multiple of this
_registered_bytes = 0  # host bytes page-locked by live HostBuffers


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


def device_problems(device: str, num_gpus: int) -> list[str]:
    """What is wrong with trainer.device on a machine that sees `num_gpus` GPUs (checked at start-up)."""
    if device not in DEVICE_CHOICES:
        return [f"trainer.device={device!r} is not one of {list(DEVICE_CHOICES)}"]
    if requires_accelerator(device) and num_gpus == 0:
        return ["trainer.device=cuda but no GPU is visible; use trainer.device=auto or cpu"]
    return []


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`t` on `device`. A host tensor bound for a GPU is staged in pinned memory and copied without
    blocking the host (the copy is ordered on the current stream before any kernel that reads it);
    on a CPU-only machine a host tensor is returned as is."""
    if t.device == device:
        return t
    if device.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def to_host(t: torch.Tensor) -> torch.Tensor:
    """`t` in host memory (waits for the device: the result is read next)."""
    return t.cpu()


class HostBuffer:
    """Exactly sized host memory for a fixed list of byte sizes, page-locked where CUDA exists.

    One allocation holds every slot (each starts at a 64-byte boundary); `slot(i)` is slot i as a
    uint8 tensor and `view(i, shape, dtype)` the same bytes as a typed tensor. The memory is
    registered with cudaHostRegister once, so copies to and from it run at pinned-memory speed
    without the caching host allocator's rounding (module docstring), and unregistered when the
    buffer is collected. On a CPU-only machine it is ordinary host memory.
    """

    def __init__(self, sizes: list[int]):
        self.sizes = [int(n) for n in sizes]
        self.offsets, total = [], 0
        for n in self.sizes:
            self.offsets.append(total)
            total += -(-n // _ALIGN) * _ALIGN
        self.nbytes = total
        self.data = torch.empty(total, dtype=torch.uint8)
        self.pinned = can_pin_memory() and total > 0
        if self.pinned:
            _register(self.data.data_ptr(), total)
            weakref.finalize(self, _unregister, self.data.data_ptr(), total)

    def slot(self, i: int) -> torch.Tensor:
        return self.data[self.offsets[i] : self.offsets[i] + self.sizes[i]]

    def view(self, i: int, shape, dtype: torch.dtype) -> torch.Tensor:
        return self.slot(i).view(dtype).view(shape)


def _register(ptr: int, nbytes: int) -> None:
    global _registered_bytes
    err = int(torch.cuda.cudart().cudaHostRegister(ptr, nbytes, 0))
    if err != 0:
        raise RuntimeError(f"cudaHostRegister of {nbytes} host bytes failed with CUDA error {err}")
    _registered_bytes += nbytes


def _unregister(ptr: int, nbytes: int) -> None:
    global _registered_bytes
    torch.cuda.cudart().cudaHostUnregister(ptr)
    _registered_bytes -= nbytes


def pinned_host_bytes() -> dict[str, int]:
    """Page-locked host bytes this process holds: `registered` by HostBuffers (exact) and `cached`
    by torch's caching host allocator (rounded blocks, in use or kept for reuse). 0 without CUDA."""
    cached = 0
    if is_cuda_available():
        cached = int(torch.cuda.host_memory_stats().get("allocated_bytes.current", 0))
    return {"registered": _registered_bytes, "cached": cached}


def num_visible_gpus() -> int:
    return torch.cuda.device_count() if is_cuda_available() else 0


def synchronize() -> None:
    if is_cuda_available():
        torch.cuda.synchronize()


def empty_cache() -> None:
    """Return the device blocks the caching allocator keeps but no tensor uses (a phase boundary:
    the next phase, or another process on the same GPU, may need them)."""
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


THREADS_ENV = "OMP_NUM_THREADS"  # the user's thread count for every worker, where the run starts


def requested_threads(environ=None, name: str = THREADS_ENV) -> int | None:
    """The worker thread count the user asked for with OMP_NUM_THREADS (None: not set); `name`: where
    the value was set, for the message."""
    value = (os.environ if environ is None else environ).get(THREADS_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(
            f"{name}={value!r} is not a positive whole number: set it to the threads each worker "
            f"should use (e.g. {THREADS_ENV}=4) or unset it"
        )
    return int(value)


def worker_num_threads(
    num_workers_per_node: int, cpus_per_node: float, use_gpu: bool, requested: int | None = None
) -> int:
    """torch and OpenMP threads of one worker process: the one rule (single_controller/ray_group.py
    passes it to every worker).

    - `requested` (OMP_NUM_THREADS where the run starts, `requested_threads`): that many, on every
      worker, as Ray leaves a set OMP_NUM_THREADS alone (vLLM on CPU wants one per core: doctor.py).
    - A CPU worker: one thread, whatever the node's core count (DESIGN.md: one thread per rank).
      verl's workers get one too (they ask Ray for no CPUs, and Ray then sets OMP_NUM_THREADS=1),
      and a CPU run's numbers do not change with the machine: the thread count changes the order
      of fp32 sums (docs/quickstart.md saw different weights at 1 and 2 threads).
    - A GPU worker: its share of the node's CPUs, at least one. It reserves one Ray CPU, but the
      host work it does -- offload_policy's AdamW step on host shards (a per-tensor loop: torch's
      foreach kernels are device-only) and FSDP2's host-side gradient accumulation -- scales with
      threads, and its node's other CPUs would otherwise idle (a departure from verl's one)."""
    if requested is not None:
        return requested
    if not use_gpu:
        return 1
    return max(1, int(cpus_per_node // max(num_workers_per_node, 1)))


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


def host_memory_available_gb() -> float:
    """This node's host memory not in use now (GiB): what offloaded state, pinned copies and model loads
    can still take."""
    import psutil

    return psutil.virtual_memory().available / 1024**3


def slot_memory_gb() -> tuple[float, float]:
    """(device_memory_total_gb, host_memory_available_gb) of the process calling it: one probe."""
    return device_memory_total_gb(), host_memory_available_gb()


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


def seed_rng(seed: int) -> None:
    """Seed the host generator and this process's device generator: the two `fork_rng` restores,
    and the ones sampling here draws from. `torch.manual_seed` would also seed every other CUDA
    device and queue a lazy seeding of the XPU and MTIA ones, each recording a stack trace
    (~0.5-0.8 ms a call on the tiny benchmark's worker, once per HF generate)."""
    torch.default_generator.manual_seed(seed)
    if is_cuda_available():
        torch.cuda.manual_seed(seed)


def device_rng_states() -> list[torch.Tensor] | None:
    """Every visible GPU's RNG state (None without CUDA), to restore after code that reseeds."""
    return torch.cuda.get_rng_state_all() if is_cuda_available() else None


def set_device_rng_states(states: list[torch.Tensor] | None) -> None:
    if states is not None:
        torch.cuda.set_rng_state_all(states)


# --- side streams and events (activation and manual offload); no-ops without CUDA, where copies are synchronous ---
def new_stream():
    """A side stream for copies that overlap compute (None without CUDA)."""
    return torch.cuda.Stream() if is_cuda_available() else None


def current_stream():
    """The stream work is queued on now (None without CUDA)."""
    return torch.cuda.current_stream() if is_cuda_available() else None


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


def wait_event(stream, event) -> None:
    """Work queued on `stream` (None: the current stream) from now on starts after `event` (a no-op
    for None: no CUDA, or nothing to wait for)."""
    if event is not None:
        (stream if stream is not None else torch.cuda.current_stream()).wait_event(event)


def mark_used_on(tensor: torch.Tensor, stream) -> None:
    """Tell the caching allocator `tensor` is in use on `stream` (None: the current stream), so its memory
    is not reused before that stream's queued work is done."""
    if is_cuda_available() and tensor.is_cuda:
        tensor.record_stream(stream if stream is not None else torch.cuda.current_stream())


def timing_event(stream=None):
    """A recorded timing event on `stream` (None without CUDA); `elapsed_many` reads pairs of them."""
    if not is_cuda_available():
        return None
    event = torch.cuda.Event(enable_timing=True)
    event.record(stream)
    return event


def elapsed_many(pairs: list[tuple[object, object]]) -> list[float]:
    """Seconds between each (start, stop) pair of recorded events, with one wait for all of them
    (none when every stop event has completed): never one wait per pair."""
    if any(not stop.query() for _, stop in pairs):
        synchronize()
    return [start.elapsed_time(stop) / 1000.0 for start, stop in pairs]
