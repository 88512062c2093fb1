"""MATH-style scoring: the response's last \\boxed{...} against the ground truth, after normalisation.

What counts as equal (and what does not — this is string normalisation plus exact rational arithmetic,
not a computer-algebra system):
  * the same string after dropping spaces, `\\left`/`\\right`, `\\!`-style spacing, `$`, `\\%`, degree
    marks, a trailing unit in `\\text{ ...}` (text starting with a space), `\\text{}`/`\\mathrm{}`
    wrappers, a short left-hand side (`x = 5` -> `5`), a trailing `.`, thousands separators (`1,000`);
    `\\dfrac`/`\\tfrac` read as `\\frac`, `\\frac12` as `\\frac{1}{2}`, `\\sqrt2` as `\\sqrt{2}`;
  * the same rational number when both sides are plain numbers: integers, decimals, `a/b` or
    `\\frac{a}{b}` with an optional leading `-` — so `\\frac{1}{2}` == `1/2` == `0.5` == `\\dfrac12`.
Not equal, although mathematically the same: `\\sqrt{4}` vs `2`, `x+1` vs `1+x`, `(1,2)` vs `(2,1)` as
sets, `\\pi/2` vs `\\frac{\\pi}{2}`, `0.333` vs `1/3`. A response without a \\boxed answer scores 0.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BOX_COMMANDS = ("\\boxed", "\\fbox")


def last_boxed_only_string(text: str) -> str | None:
    """The last `\\boxed{...}` (braces matched) or `\\boxed x` (up to a `$`) in `text`, or None."""
    start = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    if start < 0:
        return None
    cmd = next(c for c in _BOX_COMMANDS if text.startswith(c, start))
    after = start + len(cmd)
    if text.startswith(" ", after):
        return cmd + " " + text[after + 1 :].split("$")[0].strip()
    if not text.startswith("{", after):
        return None
    depth = 0
    for i in range(after, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start : i + 1]
    return None  # unbalanced: the answer was cut off


def remove_boxed(boxed: str) -> str:
    """The content of a string from last_boxed_only_string."""
    for cmd in _BOX_COMMANDS:
        if boxed.startswith(cmd + " "):
            return boxed[len(cmd) + 1 :]
        if boxed.startswith(cmd + "{") and boxed.endswith("}"):
            return boxed[len(cmd) + 1 : -1]
    raise ValueError(f"not a boxed answer: {boxed!r}")


_REMOVE = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "^{\\circ}", "^\\circ", "\\$", "$", "\\%", "%")
_UNIT = re.compile(r"\\(?:text|mbox)\{\s[^{}]*\}\s*$")
_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_THOUSANDS = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?")


def normalise(answer: str) -> str:
    s = answer.strip().replace("\n", "")
    for token in _REMOVE:
        s = s.replace(token, "")
    s = s.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac")
    s = _UNIT.sub("", s)
    s = _WRAPPER.sub(r"\1", s)
    s = s.replace("\\ ", "").replace(" ", "")
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
    if s.count("=") == 1 and len(s.split("=")[0]) <= 2:  # "x=5", "k=5": keep the value
        s = s.split("=")[1]
    s = s.rstrip(".")
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    return s


_DECIMAL = r"\d+(?:\.\d*)?|\.\d+"


def to_fraction(s: str) -> Fraction | None:
    """The exact value of a normalised plain number (int, decimal, a/b, \\frac{a}{b}), else None."""
    sign = -1 if s.startswith("-") else 1
    body = s[1:] if sign < 0 else s
    if re.fullmatch(_DECIMAL, body):
        return sign * Fraction(body)
    match = re.fullmatch(rf"\\frac\{{({_DECIMAL})\}}\{{({_DECIMAL})\}}", body) or re.fullmatch(
        rf"({_DECIMAL})/({_DECIMAL})", body
    )
    if match and Fraction(match.group(2)) != 0:
        return sign * Fraction(match.group(1)) / Fraction(match.group(2))
    return None


def is_equiv(answer: str, ground_truth: str) -> bool:
    a, b = normalise(answer), normalise(ground_truth)
    if a == b:
        return True
    fa, fb = to_fraction(a), to_fraction(b)
    return fa is not None and fa == fb


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 when the last boxed answer equals the ground truth (itself boxed or bare), else 0.0."""
    boxed = last_boxed_only_string(solution_str)
    if boxed is None:
        return 0.0
    truth = str(ground_truth)
    truth_boxed = last_boxed_only_string(truth)
    if truth_boxed is not None:
        truth = remove_boxed(truth_boxed)
    return 1.0 if is_equiv(remove_boxed(boxed), truth) else 0.0
