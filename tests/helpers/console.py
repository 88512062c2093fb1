"""Checks on what a CLI run printed: only verl_lite's own lines; one line per step with its headline,
and every metric of the steps that show their full block (validation steps and the last)."""

from __future__ import annotations

import re

from verl_lite.trainer.console_format import fmt_value, group_of, headline

# verl_lite's console forms: a log record ("HH:MM:SS ..."), a step's line, a full block's indented
# rows, a validation sample
OWN_LINE = re.compile(r"^(\d\d:\d\d:\d\d \S|step \d+/\d+( \| |$)| {2}\S| {18}\S|val step \d+ \| )")
STEP_LINE = re.compile(r"^(step (\d+)/(\d+)(?: \| .*)?)$", re.MULTILINE)


def foreign_lines(console: str) -> list[str]:
    """Lines of `console` that none of verl_lite's forms explains (third-party output)."""
    return [line for line in console.splitlines() if line.strip() and not OWN_LINE.match(line)]


def assert_console_is_readable(console: str) -> None:
    assert "Traceback" not in console, console[-3000:]
    assert "\r" not in console, "a progress bar's frames in a log file (stdout is not a terminal)"
    foreign = foreign_lines(console)
    assert not foreign, f"{len(foreign)} third-party line(s) on the console, e.g. {foreign[:5]}"


def step_blocks(console: str) -> dict[int, tuple[str, str]]:
    """step -> (its line, the block's rows under it up to the next step's line; "" for none)."""
    parts = STEP_LINE.split(console)  # [before, line, step, total, after, line, step, total, after, ...]
    out = {}
    for i in range(1, len(parts) - 3, 4):
        step, after = int(parts[i + 1]), parts[i + 3]
        assert step not in out, f"step {step} printed twice"
        rows = [r for r in after.splitlines() if r.startswith("  ")]  # log records start with a time
        out[step] = (parts[i], "\n".join(rows))
    return out


def assert_console_shows_the_run(console: str, rows: list[dict]) -> None:
    """Each metrics.jsonl row has its step's line with its headline values; validation steps and the
    last have every metric in their block, the others no block."""
    blocks = step_blocks(console)
    last = max(row["step"] for row in rows)
    for row in rows:
        step = row["step"]
        assert step in blocks, f"no console line for step {step}"
        line, block = blocks[step]
        metrics = {k: v for k, v in row.items() if k != "step"}
        assert line.split(" | ")[1:] == [f"{k} {v}" for k, v in headline(metrics)], line
        if step == last or any(group_of(k) == "val" for k in metrics):
            missing = [k for k, v in metrics.items() if f"{k} {fmt_value(v)}" not in block]
            assert not missing, f"step {step}: not in its block: {missing}"
        else:
            assert block == "", f"step {step} is neither a validation step nor the last: {block[:300]}"
