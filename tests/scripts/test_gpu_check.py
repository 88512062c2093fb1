"""scripts/gpu_check.sh --dry: the device check must work before a GPU is lent.

The GPU machine has no Ray, Hydra or vLLM (nor pandas, pyarrow, omegaconf), so this run hides
them: stub packages that raise ImportError shadow the installed ones. Their pytest entry points (Hydra's plugin) would still load,
so plugin autoloading is off here, as it is in effect on a machine without those packages.
"""

import importlib.util
import os
import re
import subprocess
import sys
from types import SimpleNamespace

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
    caps = [line for line in out.splitlines() if line.startswith("gpu_check: ")]
    assert caps[0].startswith("gpu_check: versions: torch ") and " peft " in caps[0], "versions first"
    assert any("weight gather collective: dist.all_gather" in line for line in caps)
    assert any("disable_custom_all_reduce=True" in line for line in caps)
    # the plan, before anything runs: issue 21's items in order, then the rows an H200 would run
    items = [line.split()[0] for line in out.split("item  check", 1)[1].splitlines()[1:10]]
    assert items == [str(i) for i in range(1, 10)], out[:3000]
    planned = out[out.index("row  model") :].splitlines()[1:3]
    assert [line.split()[1:3] for line in planned] == [
        ["qwen2.5-7b", "param_optimizer_offload"],
        ["qwen2.5-7b", "offload_policy"],
    ], "the seed's memory table first"
    total, budget = (float(x) for x in re.search(r"rows: \d+ of \d+ run, (\d+) s of (\d+) s", out).groups())
    assert 0 < total <= budget
    assert out.index("== 0/3") < out.index("== 1/3") < out.index("== 2/3"), "caps, tests, then rows"
    assert "skipped" in out, "the gpu-marked tests are collected (and skip without CUDA)"
    assert "pinned host->device copy peak not measured (no device)" in out, "no link child without a device"
    table = out[out.rindex("\nmodel ") :]  # rows are printed as they finish, then once more as a table
    rows = [line for line in table.splitlines() if line.startswith("tiny ")]
    modes = ["param_optimizer_offload", "offload_policy", "none", "lora8_policy_24gb"]
    assert [r.split()[2] for r in rows] == modes, out[-3000:]
    for row in rows:  # model params mode peak plan err tok/s /none h2d /link pinned plan
        tokens_per_s, tps_ratio = float(row.split()[6]), float(row.split()[7])
        assert tokens_per_s > 0 and tps_ratio > 0
    offloaded = {r.split()[2]: r.split()[8] for r in rows}
    assert offloaded["none"] == "-" and float(offloaded["param_optimizer_offload"]) > 0, (
        "h2d traffic measured"
    )
    assert "target tiny offload_policy peak / none <= 0.5: not measured (no device peak (CPU)" in out
    assert out.rstrip().endswith("gpu_check: OK")


def test_without_a_gpu_the_full_check_refuses_and_says_why():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the full check would run")
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "gpu_check.sh")], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 2 and "run with --dry" in proc.stderr


def _driver():
    spec = importlib.util.spec_from_file_location("gpu_check", os.path.join(ROOT, "scripts", "gpu_check.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_rows_that_cannot_fit_say_so_with_the_planners_number(capsys):
    """A 7B shape on a 4 GB card: no row runs, each says what the planner needs; a registered mode is a
    row of its own (for the models it names)."""
    gpu_check = _driver()
    gpu_check.register_mode(gpu_check.Mode("capped", "none", models=("qwen2.5-7b",), memory_cap_gb=2.0))
    with pytest.raises(ValueError, match="registered twice"):
        gpu_check.register_mode(gpu_check.Mode("capped", "none"))
    assert gpu_check.main(["--models", "qwen2.5-7b", "--device-gb", "4", "--steps", "1"]) == 0
    out = capsys.readouterr().out.split("\n\n")[-1]
    rows = {tuple(line.split()[:3:2]): line for line in out.splitlines() if line.startswith(("qwen", "tiny"))}
    assert set(rows) == {
        ("qwen2.5-7b", m)
        for m in ("none", "param_optimizer_offload", "offload_policy")
        + (
            "lora8_none_24gb",
            "lora8_param_opt_24gb",
            "lora8_policy_24gb",
            "fused_logprobs",
            "activation_offload",
        )
        + ("capped",)
    }
    assert all("does not fit (planner: " in line for line in rows.values()), out
    assert (
        "> 2.0 GiB device" in rows["qwen2.5-7b", "capped"]
        and "> 4.0 GiB device" in rows["qwen2.5-7b", "none"]
    )


def test_the_host_gate_stops_a_row_unless_overridden(capsys):
    """--plan on the lent machine's figures: the 7B offload_policy row's pinned shards and grads
    (rounded up to powers of two) and host moments exceed 85% of 128 GiB; the flag runs it anyway."""
    gpu_check = _driver()

    def row(out: str) -> str:
        return next(
            line for line in out.splitlines() if line.split()[1:3] == ["qwen2.5-7b", "offload_policy"]
        )

    gpu_check.main(["--plan"])
    assert "GiB host > 85% of 128.0 GiB free) (--ignore-host-gate runs it)" in row(capsys.readouterr().out)
    gpu_check.main(["--plan", "--ignore-host-gate"])
    assert row(capsys.readouterr().out).endswith("runs")


def test_targets_are_judged_from_the_rows():
    """Issue 12's targets from the table's numbers; where no offload cannot run, its planner estimate."""
    gpu_check = _driver()
    est = SimpleNamespace(update=20 * gpu_check.GB)
    row = dict(peak_gb=10.0, tokens_per_s=100.0, h2d_gbps=0.0, link_gbps=50.0)
    runs = {
        ("a", "none"): (est, row),
        ("a", "param_optimizer_offload"): (est, dict(row, peak_gb=8.0, tokens_per_s=70.0, h2d_gbps=25.0)),
        ("a", "offload_policy"): (est, dict(row, peak_gb=4.0, tokens_per_s=40.0)),
        ("b", "none"): (est, None),  # did not fit: the planner said 20 GB
        ("b", "offload_policy"): (est, dict(row, peak_gb=12.0)),
    }
    assert gpu_check.target_lines(runs) == [
        "target a offload_policy peak / none <= 0.5: 0.40 met",
        "target a param+optimizer offload tok/s / none >= 0.7: 0.70 met",
        "target a host link use / pinned-copy peak >= 0.7: 0.50 MISSED",
        "target b offload_policy peak / none <= 0.5 (none: planner estimate): 0.60 MISSED",
        "target b param+optimizer offload tok/s / none >= 0.7: not measured (both must run)",
        "target b host link use / pinned-copy peak >= 0.7: not measured (needs the param+optimizer offload row on a GPU)",
    ]
