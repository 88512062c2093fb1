"""Plot a run's metrics.jsonl as one PNG: reward, loss and response length against the training step.

    python scripts/plot_metrics.py checkpoints/verl_lite/tiny_arith_grpo/metrics.jsonl -o run.png
    python scripts/plot_metrics.py <trainer.default_local_dir>            # its metrics.jsonl, -> metrics.png beside it

Panels (each metric is drawn only when the run logged it, under verl's name):
  reward           critic/score/mean (training batches) and every val-core/<source>/reward/mean@N
  loss             actor/pg_loss, actor/kl_loss, critic/vf_loss
  response length  response_length/mean, with the min..max band when logged
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and in tests
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

LOSS_KEYS = ("actor/pg_loss", "actor/kl_loss", "critic/vf_loss")


def read_metrics(path: str) -> list[dict]:
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n} is not a JSON object: {e}") from e
    if not rows:
        raise ValueError(f"{path} holds no metrics")
    return rows


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    pairs = [
        (r["step"], float(r[key]))
        for r in rows
        if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])
    ]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _plot(ax, rows, key, label=None, **kw) -> bool:
    x, y = series(rows, key)
    if x:
        ax.plot(x, y, label=label or key, **kw)
    return bool(x)


def plot(rows: list[dict], out: str, title: str = "") -> list[str]:
    """Draw the three panels into `out`; return the metric keys that were drawn."""
    fig, (ax_r, ax_l, ax_len) = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    drawn = []
    if _plot(ax_r, rows, "critic/score/mean", "train: critic/score/mean", alpha=0.7):
        drawn.append("critic/score/mean")
    val_keys = sorted({k for r in rows for k in r if k.startswith("val-core/") and "/reward/mean@" in k})
    for key in val_keys:
        if _plot(ax_r, rows, key, f"val: {key.removeprefix('val-core/')}", marker="o", linewidth=2):
            drawn.append(key)
    for key in LOSS_KEYS:
        if _plot(ax_l, rows, key):
            drawn.append(key)
    if _plot(ax_len, rows, "response_length/mean", "response_length/mean"):
        drawn.append("response_length/mean")
        x_lo, lo = series(rows, "response_length/min")
        x_hi, hi = series(rows, "response_length/max")
        if lo and x_lo == x_hi:
            ax_len.fill_between(x_lo, lo, hi, alpha=0.2, label="min..max")
    if not drawn:
        plt.close(fig)
        raise ValueError("none of the plotted metrics is in the file (is it a verl_lite metrics.jsonl?)")
    for ax, name in ((ax_r, "reward"), (ax_l, "loss"), (ax_len, "response length (tokens)")):
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    ax_len.set_xlabel("training step")
    ax_len.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return drawn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("metrics", help="metrics.jsonl, or the trainer.default_local_dir holding it")
    parser.add_argument("-o", "--out", help="PNG to write (default: metrics.png beside the input)")
    parser.add_argument("--title", default=None, help="figure title (default: the input path)")
    args = parser.parse_args(argv)
    folder = args.metrics if os.path.isdir(args.metrics) else os.path.dirname(args.metrics)
    out = args.out or os.path.join(folder, "metrics.png")
    try:
        drawn = plot(read_metrics(args.metrics), out, args.title if args.title is not None else args.metrics)
    except (OSError, ValueError) as e:
        print(f"plot_metrics: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({', '.join(drawn)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
