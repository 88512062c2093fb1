"""docs/verl_scripts.md's tables from verl_launch_check's JSON-lines results (`--table-from`).

Several files combine: the latest row of each launch wins, so a re-run's file given after an older
one replaces only the launches it re-ran. Each row says which verl_lite code it ran on (`code`: the
commit the check recorded, `+changes` when the package differed from it; results recorded before
the check wrote it carry the label added to them afterwards), so a table that mixes runs of several
commits says so per launch. A launch no file has is "not run". Rows come in catalogue order, one
section per group with its counts, after a summary of all groups.
"""

from __future__ import annotations

import json

GROUPS = {
    "ci": "verl's CI (tests/special_e2e FSDP steps)",
    "docs": "docs/algo command lines",
    "docs-yaml": "docs/algo YAML blocks as user configs",
    "examples": "examples/ and the quickstart",
}
KINDS = ("ran", "refused", "failed", "skipped")  # skipped: the line starts no PPO trainer


def latest(paths: list[str]) -> dict[str, dict]:
    """The last recorded outcome of each launch over `paths`, read in order."""
    recorded: dict[str, dict] = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    recorded[row["name"]] = row
    return recorded


def counts(rows: list[dict | None]) -> list[int]:
    """ran, refused, failed, start no trainer, not run; a row is None when its launch was not run."""
    found = [sum(1 for r in rows if r and r["outcome"] == k) for k in KINDS]
    return [len(rows), *found, sum(1 for r in rows if r is None)]


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def tables(launches: list, recorded: dict[str, dict]) -> str:
    """The summary table and one table per group of `launches` (the catalogue, in order)."""
    by_group = {g: [(x.name, recorded.get(x.name)) for x in launches if x.group == g] for g in GROUPS}
    head = "| launches | total | ran | refused by name | failed | start no PPO trainer | not run this time |"
    out = [head, "|---|---|---|---|---|---|---|"]
    total = [0] * 6
    for group, rows in by_group.items():
        n = counts([r for _, r in rows])
        total = [a + b for a, b in zip(total, n)]
        out.append(f"| {GROUPS[group]} | " + " | ".join(map(str, n)) + " |")
    out.append("| all | " + " | ".join(map(str, total)) + " |")
    for group, rows in by_group.items():
        n = counts([r for _, r in rows])
        out += [
            "",
            f"### {GROUPS[group]}: {n[0]} launches: {n[1]} ran, {n[2]} refused by name, {n[3]} failed, "
            f"{n[4]} start no PPO trainer, {n[5]} not run",
            "",
            "| launch | outcome | run on | time (s) | detail |",
            "|---|---|---|---|---|",
        ]
        for name, r in rows:
            if r is None:
                out.append(f"| {_cell(name)} | not run | | | |")
            else:
                out.append(
                    f"| {_cell(name)} | {r['outcome']} | {_cell(r.get('code') or '?')} | "
                    f"{r['seconds']:.1f} | {_cell(r['detail'])} |"
                )
    return "\n".join(out)
