"""Build the embedded model in a child process with pinned numerics: the same weights, bit for bit, on
every Intel x86-64 CPU with AVX2 (since 2013), whatever its own CPU features.

Why a child process: the settings that choose torch's CPU kernels are read once, when torch and MKL
load, so a process that has already used torch cannot change them. Each setting below was seen to
change the warm-started weights on its own (tests/data/test_assets.py keeps it so):
- one thread: a matrix product split over threads sums in another order;
- ATEN_CPU_CAPABILITY=avx2: torch picks its vector kernels (softmax, norms, AdamW, ...) by CPU, and the
  AVX-512 ones round differently from the AVX2 ones that every such machine has;
- MKL_CBWR=AVX2,STRICT: MKL's matrix products dispatch on the CPU too (an AVX2-only CPU gave other
  weights than this AVX-512 one); its reproducibility mode fixes the code path for any Intel CPU that
  has AVX2. MKL documents that mode for Intel CPUs only: on other vendors (AMD) it falls back to its
  own dispatch, so their bits may differ.
What stays outside the pin: the versions of torch (and its MKL; pyproject.toml pins torch) and of
transformers (a range there), non-Intel CPUs (MKL, above), and CPUs without AVX2 or not x86-64 (an
ARM machine builds through other kernels): they build a working asset with other bits, and the build
log says so. `REFERENCE` records the bits of the pinned
build for the versions named in it; the test compares against it, so drift on any CI machine shows.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

# The pinned build's weights digest (weights_digest) for these versions: torch's release (any local build
# tag, e.g. +cpu) and transformers' minor release.
REFERENCE = {
    "torch": "2.13.0",
    "transformers": "5.19",
    "cpu_vendor": "GenuineIntel",
    "weights_sha256": "8984c0acd365f0bfb808361a2b8dc9ab55b43ed2dc67aa2d0ad9e880980e3233",
}
PINNED_CAPABILITY = "AVX2"


def pinned_env(base: Mapping[str, str]) -> dict[str, str]:
    """`base` with the kernel choices pinned and this verl_lite importable first."""
    env = dict(base)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    if platform.machine().lower() in ("x86_64", "amd64"):
        env.update(ATEN_CPU_CAPABILITY="avx2", MKL_CBWR="AVX2,STRICT")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [base.get("PYTHONPATH")])])
    return env


def run_pinned(module: str, *args: str, base_env: Mapping[str, str] | None = None) -> dict:
    """`python -m module *args` under pinned_env; the child prints one JSON object as its last line."""
    env = pinned_env(os.environ if base_env is None else base_env)
    proc = subprocess.run(
        [sys.executable, "-m", module, *args], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"building an embedded asset (python -m {module} {' '.join(args)}) failed with exit code "
            f"{proc.returncode}:\n{proc.stderr[-3000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def weights_digest(folder: str | os.PathLike) -> str:
    """sha256 over every tensor of the folder's safetensors files: name, dtype, shape and bytes, in name
    order (independent of how the file lays them out)."""
    import torch
    from safetensors.torch import load_file

    tensors = {}
    for path in sorted(Path(folder).glob("*.safetensors")):
        tensors.update(load_file(path))
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def describe_pin() -> dict:
    """What the running (child) process actually got: for the build record and for the checks."""
    import torch
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "num_threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "cpu_vendor": cpu_vendor(),
    }


def cpu_vendor() -> str:
    """The x86 vendor string (GenuineIntel, AuthenticAMD, ...) from /proc/cpuinfo, else "unknown"."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def matches_reference(record: Mapping) -> bool | None:
    """True/False when `record` was built with the reference's versions under the full pin on a CPU of
    the reference's vendor, else None."""
    same_setup = (
        str(record.get("torch")).split("+")[0] == REFERENCE["torch"]
        and ".".join(str(record.get("transformers")).split(".")[:2]) == REFERENCE["transformers"]
        and record.get("cpu_capability") == PINNED_CAPABILITY
        and record.get("cpu_vendor") == REFERENCE["cpu_vendor"]
    )
    return record.get("weights_sha256") == REFERENCE["weights_sha256"] if same_setup else None
