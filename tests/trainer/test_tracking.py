"""Tracking backends: file appends one JSON object per step (every metric); the console prints one
headline line per step and every metric at validation steps, the last step and on request."""

import io
import json

import pytest

from verl_lite.trainer.tracking import ConsoleLogger, Tracking

STEPS = [
    {"actor/pg_loss": 0.5, "critic/score/mean": 0.25, "timing_s/gen": 0.125},
    {"actor/pg_loss": 0.4, "critic/score/mean": 0.5, "timing_s/gen": 0.25, "val-core/x/reward/mean@1": 0.75},
    {"actor/pg_loss": 0.3, "critic/score/mean": 0.625, "timing_s/gen": 0.5},
    {"actor/pg_loss": 0.2, "critic/score/mean": 0.75, "timing_s/gen": 1.5},
]


def _run(tmp_path, **kw) -> None:
    tracker = Tracking(["console", "file"], str(tmp_path), total_steps=len(STEPS), **kw)
    for step, metrics in enumerate(STEPS, start=1):
        tracker.log(metrics, step=step)
    tracker.finish()


def test_every_metric_to_the_file_and_a_line_per_step_with_blocks_at_validation_and_the_end(tmp_path, capsys):
    _run(tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": i, **m} for i, m in enumerate(STEPS, start=1)]
    out = capsys.readouterr().out
    assert "\r" not in out, "no progress-bar frames when stdout is not a terminal"
    lines = out.splitlines()
    assert lines[0] == "step 1/4 | score 0.25 | pg_loss 0.5", "a plain step: its line only"
    assert lines[1] == "step 2/4 | score 0.5 | pg_loss 0.4", "a validation step: its line, then the block"
    validation = out[out.index("step 2/4") : out.index("step 3/4")]
    for text in ("actor/pg_loss 0.4", "critic/score/mean 0.5", "timing_s/gen 0.25", "x/reward/mean@1 0.75"):
        assert text in validation, text
    third, last = out[out.index("step 3/4") : out.index("step 4/4")], out[out.index("step 4/4") :]
    assert third == "step 3/4 | score 0.625 | pg_loss 0.3\n"
    assert "timing_s/gen 1.5" in last and "actor/pg_loss 0.2" in last, "the last step shows every metric"


def test_console_full_freq_asks_for_more_blocks(tmp_path, capsys):
    _run(tmp_path, console_full_freq=1)
    out = capsys.readouterr().out
    assert all(f"timing_s/gen {v}" in out for v in ("0.125", "0.25", "0.5", "1.5"))


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_bar_shows_the_headline_and_in_a_pipe_none():
    term, pipe = _Terminal(), io.StringIO()
    for stream in (term, pipe):
        console = ConsoleLogger(total_steps=4, stream=stream)
        console.log(STEPS[0], step=1)
        console.finish()
    assert "\r" in term.getvalue() and "1/4" in term.getvalue()
    assert "score 0.25 | pg_loss 0.5]" in term.getvalue(), "the bar's postfix"
    assert pipe.getvalue() == "step 1/4 | score 0.25 | pg_loss 0.5\n"


def test_unknown_backend_is_named(tmp_path):
    with pytest.raises(ValueError, match="is not supported by verl_lite"):
        Tracking(["console", "mlflow"], str(tmp_path), 1)
