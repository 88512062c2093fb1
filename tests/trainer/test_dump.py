"""Generation dumps and sample logging, end to end through the CLI (2 tiny steps).

One run with every tracker on: rollout_data_dir gets one jsonl per training step with verl's
fields, validation_data_dir one per validation, log_val_generations samples reach console, file,
W&B (offline) and TensorBoard. Scores in the dumps must be what the scorer gives the dumped text.
"""

import glob
import json
import os

import pytest

from tests.helpers.wandb_log import read_history
from tests.test_main_ppo import SMALL, read_metrics, run_cli
from verl_lite.reward.scorers import default_compute_score

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tracked")
    env = pytest.MonkeyPatch()  # module scope: undone by hand below
    env.setenv("WANDB_MODE", "offline")
    env.setenv("WANDB_SILENT", "true")
    env.delenv("WANDB_DIR", raising=False)
    env.delenv("TENSORBOARD_DIR", raising=False)
    proc = run_cli(
        tmp,
        *SMALL,
        "trainer.logger=[console,file,wandb,tensorboard]",
        "trainer.log_val_generations=3",
        f"trainer.rollout_data_dir={tmp}/rollout",
        f"trainer.validation_data_dir={tmp}/val",
        join=True,
    )
    env.undo()
    assert proc.returncode == 0, proc.stderr[-4000:]
    return tmp, proc


def _rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_rollout_dump_one_file_per_step_with_verls_fields(tracked_run):
    tmp, _ = tracked_run
    assert sorted(os.listdir(tmp / "rollout")) == ["1.jsonl", "2.jsonl"]
    metrics = {m["step"]: m for m in read_metrics(tmp)}
    for step in (1, 2):
        rows = _rows(tmp / "rollout" / f"{step}.jsonl")
        assert len(rows) == 8 * 4  # train_batch_size x rollout.n
        assert set(rows[0]) >= {"input", "output", "gts", "score", "step"}
        assert all(r["step"] == step for r in rows)
        assert "+" in rows[0]["input"] and "=" in rows[0]["input"]
        for r in rows:
            assert r["score"] == default_compute_score("verl_lite/arith", r["output"], r["gts"])
        mean = sum(r["score"] for r in rows) / len(rows)
        assert mean == pytest.approx(metrics[step]["critic/score/mean"])


def test_validation_dump_and_samples(tracked_run):
    tmp, proc = tracked_run
    assert sorted(os.listdir(tmp / "val")) == ["0.jsonl", "2.jsonl"]  # val_before_train, then test_freq=2
    metrics = {m["step"]: m for m in read_metrics(tmp)}
    for step in (0, 2):
        rows = _rows(tmp / "val" / f"{step}.jsonl")
        assert len(rows) == 1000  # the whole validation set, greedy n=1
        mean = sum(r["score"] for r in rows) / len(rows)
        assert mean == pytest.approx(metrics[step]["val-core/verl_lite/arith/reward/mean@1"])
        by_input = {r["input"]: r for r in rows}
        samples = [s for s in _rows(tmp / "run" / "val_generations.jsonl") if s["step"] == step]
        assert len(samples) == 3
        for s in samples:  # each sample is one of the dumped generations, unchanged
            assert (by_input[s["input"]]["output"], by_input[s["input"]]["score"]) == (
                s["output"],
                s["score"],
            )
    first = samples[0]
    assert f"val step 2 | input {first['input']!r}" in proc.stdout + proc.stderr


def test_wandb_and_tensorboard_got_the_run(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tmp, _ = tracked_run
    metrics = read_metrics(tmp)
    (run_file,) = glob.glob(str(tmp / "run" / "wandb" / "offline-run-*" / "run-*.wandb"))
    history = {row["_step"]: row for row in read_history(run_file)}
    for m in metrics:
        assert (
            history[m["step"]]["actor/pg_loss" if m["step"] else "val-core/verl_lite/arith/reward/mean@1"]
            == (m["actor/pg_loss" if m["step"] else "val-core/verl_lite/arith/reward/mean@1"])
        )
    assert history[2]["val/generations/nrows"] == 2  # one row per validation so far
    acc = EventAccumulator(str(tmp / "run" / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    pg = acc.Scalars("actor/pg_loss")
    assert [(e.step, pytest.approx(e.value)) for e in pg] == [
        (m["step"], m["actor/pg_loss"]) for m in metrics[1:]
    ]
    assert [t.step for t in acc.Tensors("val/generations/text_summary")] == [0, 2]
