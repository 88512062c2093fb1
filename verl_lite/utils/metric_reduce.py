"""How verl 0.9's separate_async reduces a step's local updates' metrics to one value each.

A separate_async step is parameter_sync_step local updates (trainer/separate_async.py), each with
its own metrics; verl combines them with its V1 MetricsAggregator's rules, which this repeats: the
sum of evicted-sample counts, the last value for a learning rate (`.../lr`, `..._lr`), the sum for
times (`timing_s/...`), the largest for names with `max`, the smallest for names with `min`, the sum
for names with `sum` or `total`, and otherwise the mean (the local updates hold equal numbers of
samples, so verl's sample-weighted mean is the plain one).
"""

from __future__ import annotations

SUMMED = ("training/off_policy/evicted_samples",)


def reduce_local_updates(name: str, values: list[float]) -> float:
    """`values`: the metric `name` of each local update, in order; verl's rules in verl's order."""
    lower = name.lower()
    if name in SUMMED:
        return sum(values)
    if lower == "lr" or lower.endswith(("/lr", "_lr")):
        return values[-1]
    if "timing_s/" in lower:
        return sum(values)
    if "max" in lower:
        return max(values)
    if "min" in lower:
        return min(values)
    if "sum" in lower or "total" in lower:
        return sum(values)
    return sum(values) / len(values)
