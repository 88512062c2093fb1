"""The console's picture of a step: one compact line of headline metrics, or the full grouped block.

Every step gets one line (`format_line`), the metrics a person follows over a long run, under
short labels (HEADLINE: the first of each label's keys the step has):

    step 12/120 | score 0.3125 | pg_loss -0.0121 | kl 0.00103 | grad_norm 4.264 | resp_len 5.25 | step_s 0.2164 | mem_gb 1.023

Validation steps, the last step and `trainer.console_full_freq`'s get the full block under that line
(`format_step`), every metric of the step under its verl name, grouped so a person can scan:

    step 12/120 | score 0.3125 | ...
      val             val-core/verl_lite/arith/reward/mean@1 0.3125
      actor           actor/entropy 0.7612        actor/grad_norm 4.264       actor/lr 0.0001   ...
      critic          critic/advantages/max 0.866 critic/advantages/mean 0    ...
      rollout         prompt_length/clip_ratio 0  ...  rollout/actor_logprob_abs_diff_max 8.3e-06
      timing          timing_s/actor/update 0.1237  timing_s/gen 0.06832  timing_s/step 0.2164 ...
      perf            perf/rollout_tokens_per_s 3975  perf/throughput 1266 ...
      offload/memory  perf/cpu_memory_rss_gb 1.023  perf/offload/d2h_gb 0 ...
      training        training/epoch 0  training/global_step 12

A metric's group is that of the first prefix rule it matches (GROUPS), else `other`; within a group
keys are sorted, laid out in columns as wide as the terminal. Full names, as in metrics.jsonl, W&B
and verl's console, so what is read here can be searched for there (every step's are there).
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable

Rule = Callable[[str], bool]


def _prefixes(*prefixes: str) -> Rule:
    return lambda key: key.startswith(prefixes)


def _memory(key: str) -> bool:
    return key.startswith("perf/offload/") or (key.startswith("perf/") and "memory" in key)


GROUPS: tuple[tuple[str, Rule], ...] = (
    ("val", _prefixes("val-core/", "val-aux/", "val/")),
    ("actor", _prefixes("actor/")),
    ("critic", _prefixes("critic/")),
    (
        "rollout",
        _prefixes(
            "rollout/", "response_length/", "prompt_length/", "global_seqlen/", "reward_extra/", "gdpo/"
        ),
    ),
    ("timing", _prefixes("timing_s/", "timing_per_token_ms/")),
    ("offload/memory", _memory),
    ("perf", _prefixes("perf/")),
    ("training", _prefixes("training/")),
)
OTHER = "other"
# (label, keys): the first key the step has is shown; kl is the KL loss with use_kl_loss, the in-reward
# KL with use_kl_in_reward, else the update's approximate KL; memory is the device's peak, or on a
# CPU-only run the worker's resident host memory
HEADLINE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("score", ("critic/score/mean",)),
    ("pg_loss", ("actor/pg_loss",)),
    ("kl", ("actor/kl_loss", "critic/kl", "actor/ppo_kl")),
    ("grad_norm", ("actor/grad_norm",)),
    ("vf_loss", ("critic/vf_loss",)),
    ("resp_len", ("response_length/mean",)),
    ("step_s", ("timing_s/step",)),
    ("mem_gb", ("perf/max_memory_allocated_gb", "perf/cpu_memory_rss_gb")),
)
LABEL_WIDTH = 16
INDENT = 2
GAP = 2


def fmt_value(value) -> str:
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


def group_of(key: str) -> str:
    return next((name for name, rule in GROUPS if rule(key)), OTHER)


def group_metrics(metrics: dict) -> list[tuple[str, list[tuple[str, str]]]]:
    """[(group, [(key, formatted value), ...]), ...] in GROUPS order, `other` last; empty groups left out."""
    groups: dict[str, list[tuple[str, str]]] = {name: [] for name, _ in GROUPS}
    groups[OTHER] = []
    for key in sorted(metrics):
        groups[group_of(key)].append((key, fmt_value(metrics[key])))
    return [(name, items) for name, items in groups.items() if items]


def _columns(cells: list[str], width: int) -> list[str]:
    """Cells in as many equal columns as fit `width`, row by row."""
    cell_width = max(len(c) for c in cells) + GAP
    per_row = max(1, width // cell_width)
    rows = [cells[i : i + per_row] for i in range(0, len(cells), per_row)]
    return ["".join(c.ljust(cell_width) for c in row).rstrip() for row in rows]


def headline(metrics: dict) -> list[tuple[str, str]]:
    """[(label, formatted value), ...] of the HEADLINE metrics the step has."""
    found = [(label, next((k for k in keys if k in metrics), None)) for label, keys in HEADLINE]
    return [(label, fmt_value(metrics[key])) for label, key in found if key is not None]


def format_line(metrics: dict, step: int, total_steps: int) -> str:
    return " | ".join([f"step {step}/{total_steps}"] + [f"{k} {v}" for k, v in headline(metrics)])


def format_step(metrics: dict, step: int, total_steps: int, width: int = 120) -> str:
    """The step's line, then every metric, grouped, in columns within `width`."""
    lines = [format_line(metrics, step, total_steps)]
    body_width = max(20, width - INDENT - LABEL_WIDTH)
    for name, items in group_metrics(metrics):
        for i, row in enumerate(_columns([f"{k} {v}" for k, v in items], body_width)):
            label = name if i == 0 else ""
            lines.append(" " * INDENT + label.ljust(LABEL_WIDTH) + row)
    return "\n".join(lines)


def console_width() -> int:
    return shutil.get_terminal_size(fallback=(120, 24)).columns
