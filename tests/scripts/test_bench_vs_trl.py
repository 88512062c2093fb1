"""scripts/bench_vs_trl.py times verl_lite's steps by the console line each step ends with: its pattern
must match what the trainer's console writes (the one-line headline broke it once, unnoticed)."""

import importlib.util
from pathlib import Path

from verl_lite.trainer.console_format import format_line

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_vs_trl.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_vs_trl", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_step_pattern_matches_the_console_line_of_every_step():
    pattern = _bench().STEP_BLOCK
    metrics = {"critic/score/mean": 0.5, "actor/pg_loss": -0.01, "timing_s/step": 7.0}
    for step, total in ((1, 8), (3, 8), (12, 120)):
        line = format_line(metrics, step, total)
        assert line.startswith(f"step {step}/{total} |"), line  # the headline has metrics in this case
        match = pattern.match(line)
        assert match is not None and int(match.group(1)) == step, line
    assert int(pattern.match(format_line({}, 5, 9)).group(1)) == 5  # a step with no headline metric
    assert pattern.match("step 3/8 tokens") is None  # not a step's line
