"""W&B (offline) and TensorBoard backends: what was logged is read back from the files they wrote."""

import glob
import json
import os

import pytest

from tests.helpers.wandb_log import read_history, read_run
from verl_lite.trainer.tracking import Tracking

STEPS = [
    {"actor/pg_loss": 0.5, "critic/score/mean": 0.25},
    {"actor/pg_loss": -0.125, "critic/score/mean": 0.75, "val-core/verl_lite/arith/reward/mean@1": 0.5},
]
SAMPLES = [("1+2=", "3", 1.0), ("4+4=", "9", 0.0)]


def _log_two_steps(backends, local_dir):
    tracker = Tracking(backends, str(local_dir), 2, project_name="proj", experiment_name="exp", config=None)
    for step, metrics in enumerate(STEPS, start=1):
        tracker.log(metrics, step=step)
    tracker.log_generations(SAMPLES, step=2)
    tracker.finish()


def test_wandb_offline_run_holds_the_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    _log_two_steps(["wandb"], tmp_path)
    (run_file,) = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
    run = read_run(run_file)
    assert (run.project, run.display_name) == ("proj", "exp")
    history = read_history(run_file)
    logged = [{k: v for k, v in row.items() if k in STEPS[1]} for row in history]
    assert [row["_step"] for row in history] == [1, 2]  # wandb merges what one step logs into one row
    assert logged == STEPS
    # the validation samples: a table file with one row (step, input_1, output_1, score_1, ...)
    table_path = history[1]["val/generations/path"]

    with open(os.path.join(os.path.dirname(run_file), "files", table_path)) as f:
        table = json.load(f)
    assert table["columns"][:4] == ["step", "input_1", "output_1", "score_1"]
    assert table["data"] == [[2, "1+2=", "3", 1.0, "4+4=", "9", 0.0]]


def test_tensorboard_event_files_read_back(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.delenv("TENSORBOARD_DIR", raising=False)
    _log_two_steps(["tensorboard"], tmp_path)
    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    for key in STEPS[1]:
        events = acc.Scalars(key)
        expected = [(s, m[key]) for s, m in enumerate(STEPS, start=1) if key in m]
        assert [(e.step, pytest.approx(e.value)) for e in events] == expected
    (text,) = acc.Tensors("val/generations/text_summary")
    body = text.tensor_proto.string_val[0].decode()
    assert text.step == 2 and "**input:** 4+4=" in body and "**output:** 9" in body


def test_tensorboard_dir_env_is_honoured(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb_env"))
    _log_two_steps(["tensorboard"], tmp_path / "local")
    assert glob.glob(str(tmp_path / "tb_env" / "events.out.tfevents.*"))
    assert not os.path.exists(tmp_path / "local" / "tensorboard")


def test_file_backend_keeps_val_generations(tmp_path):
    _log_two_steps(["file"], tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "val_generations.jsonl").read_text().splitlines()]
    assert rows == [{"step": 2, "input": i, "output": o, "score": s} for i, o, s in SAMPLES]


def test_non_numeric_metric_is_named(tmp_path):
    tracker = Tracking(["tensorboard"], str(tmp_path), 1)
    with pytest.raises(TypeError, match="actor/pg_loss"):
        tracker.log({"actor/pg_loss": "nan?"}, step=1)
    tracker.finish()
