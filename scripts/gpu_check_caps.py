"""The device check's first part: versions and capabilities of the machine it runs on, one line each.

    python scripts/gpu_check_caps.py

What the later parts depend on, so a failure there can be read against it: torch, transformers, peft,
pytest (and whether Ray, vLLM, Hydra are there for the end-to-end part); the device, its memory and
the host's; bf16; pinned host memory; the collective the weight gather uses (all_gather_single from
torch 2.13, else all_gather_into_tensor: engine/weight_gather.py); the attention kernel verl's default
resolves to here (engine/attention.py); the vLLM engine arguments the hybrid engine would pass for
tensor parallelism (rollout/vllm_rollout.py, checked without importing vLLM). Needs torch and this
repository only.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from verl_lite.engine.attention import select_attention  # noqa: E402
from verl_lite.engine.weight_gather import flat_all_gather  # noqa: E402
from verl_lite.utils import device as dev  # noqa: E402

PACKAGES = (
    "torch",
    "transformers",
    "peft",
    "pytest",
    "safetensors",
    "flash_attn",
    "ray",
    "vllm",
    "hydra-core",
)


def version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def host_gib() -> str:
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        total, free = (int(fields[k].split()[0]) / 2**20 for k in ("MemTotal", "MemAvailable"))
        return f"{free:.0f} of {total:.0f} GiB available"
    except (OSError, KeyError, ValueError):
        return "unknown"


def lines() -> list[str]:
    out = ["versions: " + ", ".join(f"{p} {version(p)}" for p in PACKAGES)]
    gpu = dev.has_accelerator()
    devices = "; ".join(f"{n}: {d}" for n, d in dev.describe_devices()) or "none (CPU only)"
    out.append(
        f"devices: {devices}; cuda {torch.version.cuda}; host memory {host_gib()}, {os.cpu_count()} CPUs"
    )
    bf16 = torch.cuda.is_bf16_supported() if gpu else "n/a (CPU)"
    pinned = dev.pinned_memory_problem() if gpu else "n/a (CPU)"
    out.append(f"bf16: {bf16}; pinned host memory: {'ok' if pinned is None else pinned}")
    gather = flat_all_gather(dist).__name__
    out.append(f"weight gather collective: dist.{gather} (torch {torch.__version__.split('+')[0]})")
    choice = select_attention(None, accelerator=gpu)
    out.append(
        f"attention for verl's default flash_attention_2: {choice.implementation}"
        + (f" ({choice.why})" if choice.why else "")
        + f"; flex_attention module: {importlib.util.find_spec('torch.nn.attention.flex_attention') is not None}"
    )
    out.append(f"vLLM TP engine args: {vllm_tp_args()}")
    return out


def vllm_tp_args() -> str:
    """What the hybrid engine passes vLLM for verl's default TP=2 (no vLLM import)."""
    from tests.helpers.configs import tiny_model, tiny_rollout
    from verl_lite.rollout.vllm_rollout import engine_kwargs

    rollout = tiny_rollout(tensor_model_parallel_size=2)
    kwargs = engine_kwargs(tiny_model("/model"), rollout, enable_sleep_mode=dev.has_accelerator())
    keys = (
        "tensor_parallel_size",
        "disable_custom_all_reduce",
        "distributed_executor_backend",
        "enable_sleep_mode",
    )
    return ", ".join(f"{k}={kwargs[k]}" for k in keys)


if __name__ == "__main__":
    for line in lines():
        print(f"gpu_check: {line}", flush=True)
