"""GSM8K scoring: the number after `#### ` (strict) or the last number (flexible), as verl's gsm8k.py.

strict    the model must write `#### <number>`; the last such answer counts. This also rewards the
          format the data_preprocess prompt asks for ("output the final answer after ####").
flexible  the last number anywhere in the response (a format-free accuracy).
Only the last 300 characters are searched (verl's bound: the answer comes last, and a regex over a
very long degenerate response is slow). Score: `score` for a correct answer, `format_score` for an
answer in the right format that is wrong, 0 when no answer is found.

One deliberate difference from verl, which compares strings: answers are compared as numbers after
removing `,` and `$` and a trailing `.`, so "1,000", "1000.", "1000.0" all equal a ground truth
"1000". GSM8K's ground truths are plain integers, so this only forgives harmless spellings.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

SEARCH_LAST_CHARS = 300
_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_NUMBER = re.compile(r"(\-?[0-9\.\,]+)")
METHODS = ("strict", "flexible")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """The answer string the response commits to, or None."""
    if method not in METHODS:
        raise ValueError(f"gsm8k method={method!r} is not one of {METHODS}")
    tail = solution_str[-SEARCH_LAST_CHARS:]
    if method == "strict":
        found = _STRICT.findall(tail)
        return found[-1] if found else None
    candidates = [c for c in _NUMBER.findall(tail) if c.strip(".,")]  # skip bare '.' and ','
    return candidates[-1] if candidates else None


def _normalise(answer: str) -> str:
    return answer.replace(",", "").replace("$", "").strip().rstrip(".")


def same_number(answer: str, ground_truth: str) -> bool:
    a, b = _normalise(answer), _normalise(str(ground_truth))
    try:
        return Decimal(a) == Decimal(b)
    except InvalidOperation:
        return a == b


def compute_score(
    solution_str: str,
    ground_truth: str,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    answer = extract_solution(solution_str, method)
    if answer is None:
        return 0.0
    return score if same_number(answer, ground_truth) else format_score
