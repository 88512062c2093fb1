"""scripts/plot_val_curves.py: several runs' metrics.jsonl in, one real PNG and each curve's numbers out."""

import json
import subprocess
import sys
from pathlib import Path

from PIL import Image

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "plot_val_curves.py"
KEY = "val-core/verl_lite/arith/reward/mean@1"


def _write_run(folder: Path, values: list[float]) -> Path:
    folder.mkdir()
    rows = [{"step": 10 * i, KEY: v, "critic/score/mean": 0.5} for i, v in enumerate(values)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_curves_of_several_runs_with_their_numbers(tmp_path):
    a = _write_run(tmp_path / "seed1", [0.2, 0.5, 0.4])
    b = _write_run(tmp_path / "seed2", [0.25, 0.3, 0.45])
    out = tmp_path / "curves.png"
    proc = _run(a, b / "metrics.jsonl", "--labels", "data.seed=1", "data.seed=2", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert (
        "data.seed=1: start 0.200 (step 0), end 0.400 (step 20), gain +0.200, peak 0.500 (step 10)"
        in proc.stdout
    )
    assert (
        "data.seed=2: start 0.250 (step 0), end 0.450 (step 20), gain +0.200, peak 0.450 (step 20)"
        in proc.stdout
    )
    with Image.open(out) as img:
        assert img.format == "PNG" and img.size[0] > 300


def test_a_run_without_validation_is_named(tmp_path):
    run = tmp_path / "novalid"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "critic/score/mean": 0.1}) + "\n")
    proc = _run(run, "-o", tmp_path / "x.png")
    assert proc.returncode == 2 and "novalid" in proc.stderr and "val-core" in proc.stderr
    assert not (tmp_path / "x.png").exists()


def test_labels_must_match_runs(tmp_path):
    a = _write_run(tmp_path / "seed1", [0.2, 0.5])
    proc = _run(a, "--labels", "x", "y", "-o", tmp_path / "x.png")
    assert proc.returncode == 2 and "1 runs but 2 --labels" in proc.stderr
