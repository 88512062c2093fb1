"""Checks on what a CLI run printed: only verl_lite's own lines, and every logged metric on it."""

from __future__ import annotations

import re

from verl_lite.trainer.console_format import fmt_value

# verl_lite's console forms: a log record ("HH:MM:SS ..."), a step header, a step block's indented
# rows, a validation sample
OWN_LINE = re.compile(r"^(\d\d:\d\d:\d\d \S|step \d+/\d+$| {2}\S| {18}\S|val step \d+ \| )")
STEP_HEADER = re.compile(r"^step (\d+)/\d+$", re.MULTILINE)


def foreign_lines(console: str) -> list[str]:
    """Lines of `console` that none of verl_lite's forms explains (third-party output)."""
    return [line for line in console.splitlines() if line.strip() and not OWN_LINE.match(line)]


def assert_console_is_readable(console: str) -> None:
    assert "Traceback" not in console, console[-3000:]
    foreign = foreign_lines(console)
    assert not foreign, f"{len(foreign)} third-party line(s) on the console, e.g. {foreign[:5]}"


def step_blocks(console: str) -> dict[int, str]:
    parts = STEP_HEADER.split(console)
    return {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def assert_every_metric_on_console(console: str, rows: list[dict]) -> None:
    """Each metrics.jsonl row's keys, with their values, in that step's block."""
    blocks = step_blocks(console)
    for row in rows:
        step = row["step"]
        assert step in blocks, f"no console block for step {step}"
        missing = [k for k, v in row.items() if k != "step" and f"{k} {fmt_value(v)}" not in blocks[step]]
        assert not missing, f"step {step}: not on the console: {missing}"
