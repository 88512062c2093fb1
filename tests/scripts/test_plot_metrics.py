"""scripts/plot_metrics.py: a metrics.jsonl in, a real PNG out (decoded back), bad input named."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "plot_metrics.py"


def _write_metrics(path: Path) -> None:
    rows = [{"step": 0, "val-core/verl_lite/arith/reward/mean@1": 0.1}]
    for step in range(1, 11):
        rows.append(
            {
                "step": step,
                "critic/score/mean": step / 20,
                "actor/pg_loss": -0.01 * step,
                "response_length/mean": 3 + step / 10,
                "response_length/min": 1,
                "response_length/max": 8,
                **({"val-core/verl_lite/arith/reward/mean@1": step / 25} if step % 5 == 0 else {}),
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_png_from_metrics(tmp_path):
    _write_metrics(tmp_path / "metrics.jsonl")
    proc = _run(tmp_path)  # a run folder: reads its metrics.jsonl, writes metrics.png beside it
    assert proc.returncode == 0, proc.stderr
    for key in ("critic/score/mean", "val-core/verl_lite/arith/reward/mean@1", "actor/pg_loss"):
        assert key in proc.stdout
    with Image.open(tmp_path / "metrics.png") as img:
        img.verify()
    with Image.open(tmp_path / "metrics.png") as img:
        assert img.format == "PNG" and img.size == (800, 900)
        assert len(img.convert("L").getcolors(1 << 16)) > 10, "a blank canvas is not a plot"


@pytest.mark.parametrize(
    "content, match", [("", "holds no metrics"), ('{"step": 1}\nnot json\n', ":2 is not")]
)
def test_bad_metrics_file_is_named(tmp_path, content, match):
    (tmp_path / "m.jsonl").write_text(content)
    proc = _run(tmp_path / "m.jsonl", "-o", tmp_path / "x.png")
    assert proc.returncode == 2 and match in proc.stderr
    assert not (tmp_path / "x.png").exists()


def test_file_without_known_metrics_is_an_error(tmp_path):
    (tmp_path / "m.jsonl").write_text('{"step": 1, "foo": 2}\n')
    proc = _run(tmp_path / "m.jsonl", "-o", tmp_path / "x.png")
    assert proc.returncode == 2 and "none of the plotted metrics" in proc.stderr
