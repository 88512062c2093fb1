"""scripts/verl_launch_table.py: results files of runs on different code combine into
docs/verl_scripts.md's tables, the latest row of each launch winning, each row naming its code."""

from __future__ import annotations

import json
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import verl_launch_table as table  # noqa: E402
import verl_launches as catalogue  # noqa: E402


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _row(name, group, outcome, detail, code):
    return {"name": name, "group": group, "outcome": outcome, "seconds": 1.5, "detail": detail, "code": code}


def test_a_rerun_replaces_only_its_launches_and_each_row_names_its_code(tmp_path):
    launches = [
        catalogue.Launch("ci a", "a.sh", "ci"),
        catalogue.Launch("ci b", "b.sh", "ci"),
        catalogue.Launch("yaml c", "", "docs-yaml"),
        catalogue.Launch("docs d", "d.sh", "docs"),
        catalogue.Launch("ex e", "e.sh", "examples"),
    ]
    old = _write(
        tmp_path / "old.jsonl",
        [
            _row("ci a", "ci", "refused", "x.y=1 is not supported", "old branch"),
            _row("ci b", "ci", "ran", "step 1", "old branch"),
            _row("yaml c", "docs-yaml", "refused", "z is not a key", "old branch"),
            _row("docs d", "docs", "skipped", "starts no PPO trainer", "old branch"),
        ],
    )
    new = _write(
        tmp_path / "new.jsonl",
        [
            _row("ci a", "ci", "ran", "step 1, actor/pg_loss 0.1", "abc1234"),
            _row("yaml c", "docs-yaml", "failed", "traceback: a | b", "abc1234+changes"),
        ],
    )
    text = table.tables(launches, table.latest([old, new]))
    lines = text.splitlines()
    assert "| ci a | ran | abc1234 | 1.5 | step 1, actor/pg_loss 0.1 |" in lines
    assert "| ci b | ran | old branch | 1.5 | step 1 |" in lines
    assert "| yaml c | failed | abc1234+changes | 1.5 | traceback: a / b |" in lines  # no stray column
    assert "| ex e | not run | | | |" in lines
    assert "| verl's CI (tests/special_e2e FSDP steps) | 2 | 2 | 0 | 0 | 0 | 0 |" in lines
    assert "| docs/algo command lines | 1 | 0 | 0 | 0 | 1 | 0 |" in lines
    assert "| all | 5 | 2 | 0 | 1 | 1 | 1 |" in lines
    # the files' order decides: the old file read last wins again
    assert (
        "| ci a | refused | old branch | 1.5 | x.y=1 is not supported |"
        in table.tables(launches, table.latest([new, old])).splitlines()
    )


def test_a_run_shows_rollout_correction_exactly_when_the_config_sets_it(tmp_path):
    import verl_launch_check as launch_check

    def meaning(**on):
        off = dict(
            critic=False, kl_loss=False, kl_reward=False, rollout_is=False, rollout_rs=False, lora=False
        )
        return launch_check.Meaning(**(off | on))

    row = {"step": 1, "actor/pg_loss": 0.5, "rollout_corr/rollout_is_mean": 1.0, "rollout_corr/kl": 0.0}
    (tmp_path / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    ok, shown = launch_check.check_meaning(str(tmp_path), meaning(rollout_is=True), resumed=False)
    assert ok and "rollout_corr/rollout_is_mean 1" in shown
    ok, shown = launch_check.check_meaning(str(tmp_path), meaning(rollout_is=True, rollout_rs=True), False)
    assert not ok and "NO rollout_corr/rollout_rs_masked_fraction" in shown  # rejection silently off
    ok, _ = launch_check.check_meaning(str(tmp_path), meaning(), resumed=False)
    assert not ok  # weights applied that the config does not ask for
