"""Scores that enter the loss (a reward function's, an agent loop's reward_score, an interaction's
turn score): one coercion to float and one check, so each site refuses the same values the same way.

numbers.Real covers Python's and numpy's ints and floats (np.float32(1.0), np.int64(3)); an int no
float can hold (10**400) is refused, not an OverflowError from math.isfinite.
"""

from __future__ import annotations

import math
import numbers


def as_float(value) -> float | None:
    """A real number as a float; None for anything else, and for a number no float can hold."""
    if not isinstance(value, numbers.Real):
        return None
    try:
        return float(value)
    except (OverflowError, ValueError):
        return None


def short_repr(value) -> str:
    """repr of a returned value, cut to fit one line (an int of 400 digits is not read whole)."""
    text = (
        repr(value)
        if not isinstance(value, int) or abs(value) < 10**50
        else f"an integer of {len(str(abs(value)))} digits"
    )
    return text if len(text) <= 120 else text[:117] + "..."


def finite_score(value) -> float | None:
    """`value` as a float when it is a finite real number and not a bool (True is a flag, not a
    score); None otherwise."""
    if isinstance(value, bool):
        return None
    number = as_float(value)
    return number if number is not None and math.isfinite(number) else None
