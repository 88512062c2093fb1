"""scripts/gpu_check.sh --dry: the device check must work before a GPU is lent.

The GPU machine has no Ray, Hydra or vLLM (nor pandas, pyarrow, omegaconf), so this run hides
them: stub packages that raise ImportError shadow the installed ones. Their pytest entry points (Hydra's plugin) would still load,
so plugin autoloading is off here, as it is in effect on a machine without those packages.
"""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir)


def test_dry_run_passes_without_ray_hydra_or_vllm(tmp_path):
    for name in ("ray", "hydra", "vllm", "pandas", "pyarrow", "omegaconf", "tensordict"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('no {name} on the GPU machine')\n")
    env = dict(
        os.environ, PYTHONPATH=str(tmp_path), PYTHON=sys.executable, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"
    )
    proc = subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "gpu_check.sh"), "--dry"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "skipped" in out, "the gpu-marked tests are collected (and skip without CUDA)"
    rows = [line for line in out.splitlines() if line.startswith("tiny ")]
    assert [r.split()[2] for r in rows] == ["none", "param_optimizer_offload", "offload_policy"], out[-3000:]
    for row in rows:
        tokens_per_s, tps_ratio = float(row.split()[5]), float(row.split()[-1])
        assert tokens_per_s > 0 and tps_ratio > 0
    assert out.rstrip().endswith("gpu_check: OK")


def test_without_a_gpu_the_full_check_refuses_and_says_why():
    if subprocess.run(
        [sys.executable, "-c", "import torch; assert not torch.cuda.is_available()"]
    ).returncode:
        pytest.skip("a GPU is present: the full check would run")
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "gpu_check.sh")], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 2 and "run with --dry" in proc.stderr
