"""Plot the validation reward of several runs in one PNG, e.g. the demo's data seeds side by side.

    python scripts/plot_val_curves.py /tmp/demo_seed1 /tmp/demo_seed2 /tmp/demo_seed3 \
        --labels "data.seed=1" "data.seed=2" "data.seed=3" -o docs/img/demo_seeds.png

Each input is a metrics.jsonl or the trainer.default_local_dir holding it; every
val-core/<source>/reward/mean@N it logged is drawn against the training step, and the console
gets each curve's start, end and peak. Labels default to the inputs' folder names, so the figure
names no machine-specific path unless asked to.
"""

from __future__ import annotations

import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_metrics import read_metrics, series  # noqa: E402


def val_curves(path: str) -> dict[str, tuple[list[int], list[float]]]:
    rows = read_metrics(path)
    keys = sorted({k for r in rows for k in r if k.startswith("val-core/") and "/reward/mean@" in k})
    if not keys:
        raise ValueError(f"{path} logged no val-core/<source>/reward/mean@N (was validation on?)")
    return {key: series(rows, key) for key in keys}


def summary(steps: list[int], values: list[float]) -> str:
    peak = max(range(len(values)), key=values.__getitem__)
    return (
        f"start {values[0]:.3f} (step {steps[0]}), end {values[-1]:.3f} (step {steps[-1]}), "
        f"gain {values[-1] - values[0]:+.3f}, peak {values[peak]:.3f} (step {steps[peak]})"
    )


def plot(inputs: list[str], labels: list[str], out: str, title: str) -> list[str]:
    """Labels "<group> / <run>" (e.g. "sync / seed 1") share their group's colour, one line style per
    run of the group: the seeds of several modes, side by side."""
    many = len(inputs) > 6  # the legend beside the axes, not over the curves
    fig, ax = plt.subplots(figsize=(11.5 if many else 8, 4.5))
    lines, colours, styles = [], {}, ("-", "--", ":", "-.")
    seen: dict[str, int] = {}
    for path, label in zip(inputs, labels):
        group = label.split(" / ")[0]
        colour = colours.setdefault(group, f"C{len(colours)}")
        style = styles[seen.get(group, 0) % len(styles)]
        seen[group] = seen.get(group, 0) + 1
        for key, (steps, values) in val_curves(path).items():
            name = label if len(inputs) > 1 else key.removeprefix("val-core/")
            ax.plot(steps, values, marker="o", linewidth=2, label=name, color=colour, linestyle=style)
            lines.append(f"{name}: {summary(steps, values)}")
    ax.set_xlabel("training step")
    ax.set_ylabel("validation reward (greedy)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9, **({"loc": "center left", "bbox_to_anchor": (1.01, 0.5)} if many else {}))
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", help="metrics.jsonl files or trainer.default_local_dir folders")
    parser.add_argument("--labels", nargs="+", help="one legend label per run (default: folder names)")
    parser.add_argument("-o", "--out", required=True, help="PNG to write")
    parser.add_argument("--title", default="validation reward", help="figure title")
    args = parser.parse_args(argv)
    labels = args.labels or [
        os.path.basename(os.path.normpath(r if os.path.isdir(r) else os.path.dirname(r))) for r in args.runs
    ]
    if len(labels) != len(args.runs):
        print(f"plot_val_curves: {len(args.runs)} runs but {len(labels)} --labels", file=sys.stderr)
        return 2
    try:
        lines = plot(args.runs, labels, args.out, args.title)
    except (OSError, ValueError) as e:
        print(f"plot_val_curves: {e}", file=sys.stderr)
        return 2
    print("\n".join(lines + [f"wrote {args.out}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
