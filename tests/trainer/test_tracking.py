"""Tracking backends: file appends one JSON object per step; console prints every metric per step."""

import json

import pytest

from verl_lite.trainer.tracking import Tracking


def test_file_and_console_backends(tmp_path, capsys):
    tracker = Tracking(["console", "file"], str(tmp_path), total_steps=2)
    tracker.log({"actor/pg_loss": 0.5, "critic/score/mean": 0.25}, step=1)
    tracker.log({"actor/pg_loss": 0.4, "val-core/x/reward/mean@1": 0.75}, step=2)
    tracker.finish()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines == [
        {"step": 1, "actor/pg_loss": 0.5, "critic/score/mean": 0.25},
        {"step": 2, "actor/pg_loss": 0.4, "val-core/x/reward/mean@1": 0.75},
    ]
    out = capsys.readouterr().out
    first, second = out.split("step 2/2")
    assert first.startswith("step 1/2") and "actor/pg_loss 0.5" in first and "critic/score/mean 0.25" in first
    assert "actor/pg_loss 0.4" in second and "val-core/x/reward/mean@1 0.75" in second


def test_unknown_backend_is_named(tmp_path):
    with pytest.raises(ValueError, match="is not supported by verl_lite"):
        Tracking(["console", "mlflow"], str(tmp_path), 1)
