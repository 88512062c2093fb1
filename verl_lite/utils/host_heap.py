"""glibc's malloc settings for CPU workers: keep the update's freed activations mapped.

On a CPU-only node the forward and backward allocate their activations from the host heap. glibc
mmaps a block above an adaptive threshold (128 KiB, rising to a freed block's size up to 32 MiB)
and gives the heap's free top back to the kernel whenever it exceeds twice that threshold. After an
update frees its activations, the next update takes the same memory again as fresh pages, which the
kernel zero-fills on first touch: at 21M parameters that was 40k-136k page faults and up to 0.7 s
of a ~4.6 s update, on the steps that faulted (docs/performance.md, issue 25).

A CPU worker therefore starts with three of glibc's own variables (read once, at process start):
blocks below 32 MiB come from the heap (`MALLOC_MMAP_THRESHOLD_`, glibc's largest adaptive value,
now fixed), the heap keeps up to 1 GiB of free top (`MALLOC_TRIM_THRESHOLD_`) and grows in 64 MiB
steps (`MALLOC_TOP_PAD_`). Nothing computed changes. What it costs: a worker's resident memory
stays at its peak between phases instead of falling back (freed heap memory is reused by the next
allocation), and the peak is a little higher (at 21M: 3.35-3.44 GB against 3.25-3.33 GB); blocks of
32 MiB and more are mmapped and returned as before. A variable set where the run starts (its environment, or
ray_kwargs.ray_init.runtime_env.env_vars) wins over ours, for each of the three: set
`MALLOC_TRIM_THRESHOLD_=131072` (glibc's default) there to give freed memory back at once. GPU
workers are left alone: their activations live on the device.
"""

from __future__ import annotations

from collections.abc import Mapping

MIB = 1024**2

KEEP_FREED = {
    "MALLOC_MMAP_THRESHOLD_": str(32 * MIB),
    "MALLOC_TRIM_THRESHOLD_": str(1024 * MIB),
    "MALLOC_TOP_PAD_": str(64 * MIB),
}


def cpu_worker_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The malloc variables of a CPU worker's environment: `environ`'s own where it sets one."""
    return {key: environ.get(key, value) for key, value in KEEP_FREED.items()}
