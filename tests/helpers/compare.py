"""Two training runs compared the way the invariance tests compare them: step by step, then tensor by
tensor, each within a tolerance the test states (and justifies) itself.

A run is a tuple whose first two items are its history, one entry per optimizer step (a tuple of
scalars, or a dict of metrics), and its final tensors by name (params, adapters, ...); anything after
them is the test's own. Both runs must have as many steps and the same tensor names, and neither may
be empty, so a comparison can never pass by comparing nothing.
"""

from __future__ import annotations

from collections.abc import Sequence


def max_abs_diff(a: dict, b: dict) -> float:
    """The largest elementwise |a - b| over tensors of the same names."""
    assert sorted(a) == sorted(b) and a, f"different or no tensors: {sorted(a)} vs {sorted(b)}"
    return max((a[n] - b[n]).abs().max().item() for n in a)


def assert_same_history(
    hist_a: Sequence,
    hist_b: Sequence,
    label: str,
    metrics: Sequence[str],
    tol: float,
    steps: int | None = None,
):
    """Every step's metrics within `tol` (and `steps` steps, when given). Tuple entries hold `metrics`
    in order; dict entries by name."""
    assert len(hist_a) == len(hist_b) > 0, f"{label}: {len(hist_a)} vs {len(hist_b)} steps"
    assert steps is None or len(hist_a) == steps, f"{label}: {len(hist_a)} steps, not {steps}"
    for step, (ma, mb) in enumerate(zip(hist_a, hist_b)):
        values_a = [ma[k] for k in metrics] if isinstance(ma, dict) else ma
        values_b = [mb[k] for k in metrics] if isinstance(mb, dict) else mb
        assert len(values_a) == len(values_b) == len(metrics), f"{label}: step {step + 1} {ma} vs {mb}"
        for key, x, y in zip(metrics, values_a, values_b):
            assert abs(x - y) < tol, f"{label}: step {step + 1} {key} {x} vs {y}"


def assert_same_run(
    a: tuple,
    b: tuple,
    label: str,
    tol: float,
    tensor_tol: float | None = None,
    metrics: Sequence[str] = ("pg_loss", "grad_norm"),
    tensors: str = "params",
    steps: int | None = None,
):
    """History within `tol`, final tensors within `tensor_tol` (default: `tol`)."""
    assert_same_history(a[0], b[0], label, metrics, tol, steps)
    worst = max_abs_diff(a[1], b[1])
    limit = tol if tensor_tol is None else tensor_tol
    where = max(a[1], key=lambda n: (a[1][n] - b[1][n]).abs().max().item())
    assert worst < limit, f"{label}: {tensors} differ by {worst} (most in {where})"
