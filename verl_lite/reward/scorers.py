"""Rule-based scorers, looked up by a row's data_source.

A scorer has verl's signature, `compute_score(data_source, solution_str, ground_truth, extra_info)`,
and returns a number or a dict with a "score" key (other keys are logged as extra reward info).
A custom scorer is loaded from `custom_reward_function.path` / `.name`.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable

from verl_lite.reward import gsm8k, math_answer
from verl_lite.utils.user_code import exits_as_errors
from verl_lite.utils.verl_paths import missing_verl_module

_SCORERS: dict[str, Callable] = {}


def register_scorer(*data_sources: str) -> Callable[[Callable], Callable]:
    def deco(fn: Callable) -> Callable:
        for ds in data_sources:
            _SCORERS[ds] = fn
        return fn

    return deco


@register_scorer("verl_lite/arith")
def score_arith(data_source, solution_str: str, ground_truth: str, extra_info=None) -> float:
    """1.0 when the response is exactly the integer answer (surrounding whitespace allowed)."""
    return (
        1.0 if re.fullmatch(r"\s*-?\d+\s*", solution_str) and int(solution_str) == int(ground_truth) else 0.0
    )


@register_scorer("verl_lite/arith_tool")
def score_arith_tool(data_source, solution_str: str, ground_truth: str, extra_info=None) -> float:
    """The tool demo (data/arith_tool.py): the answer after `#### `, as the GSM8K rule reads it, so a
    tool's reply in the response (a bare number) is never taken for the model's answer."""
    return gsm8k.compute_score(solution_str, ground_truth, method="strict")


# verl's data_source names (verl/utils/reward_score/__init__.py), so its parquet files score unchanged
GSM8K_SOURCES = ("openai/gsm8k",)
MATH_SOURCES = ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500")


@register_scorer(*GSM8K_SOURCES)
def score_gsm8k(data_source, solution_str: str, ground_truth: str, extra_info=None) -> float:
    """verl's default for GSM8K: strict `#### <answer>`, 1 if right, 0 otherwise (reward/gsm8k.py)."""
    return gsm8k.compute_score(solution_str, ground_truth, method="strict")


@register_scorer(*MATH_SOURCES)
def score_math(data_source, solution_str: str, ground_truth: str, extra_info=None) -> float:
    """The last \\boxed{} answer against the ground truth (reward/math_answer.py says what is equal)."""
    return math_answer.compute_score(solution_str, ground_truth)


def default_compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if data_source not in _SCORERS:
        raise ValueError(
            f"no reward scorer for data_source={data_source!r} (known: {sorted(_SCORERS)}); "
            "set custom_reward_function.path and custom_reward_function.name"
        )
    return _SCORERS[data_source](data_source, solution_str, ground_truth, extra_info)


def missing_scorers(sources) -> list[str]:
    """The data_source names among `sources` that no built-in scorer handles."""
    return sorted({s for s in sources if s not in _SCORERS})


def known_sources() -> list[str]:
    return sorted(_SCORERS)


def _import_error(path: str, e: BaseException) -> str:
    if isinstance(e, SyntaxError):
        return f"custom_reward_function.path={path!r} has a syntax error at line {e.lineno}: {e.msg}; fix the file"
    verl = missing_verl_module(e)
    if verl is not None:
        return f"custom_reward_function.path={path!r} fails to import: {verl}"
    return (
        f"custom_reward_function.path={path!r} fails to import: {type(e).__name__}: {e}; "
        "fix the file (or install what it imports)"
    )


def load_custom_scorer(path: str | None, name: str) -> Callable:
    """The scorer named by custom_reward_function, or the built-in registry when path is null."""
    if not path:
        return default_compute_score
    if not os.path.exists(path):
        raise FileNotFoundError(f"custom_reward_function.path={path!r} does not exist")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"custom_reward_function.path={path!r} is not a file; point it at a .py file")
    spec = importlib.util.spec_from_file_location("custom_reward_module", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"custom_reward_function.path={path!r} is not a Python file (it needs a .py name)")
    module = importlib.util.module_from_spec(spec)
    with exits_as_errors(  # sys.exit() at import would end the run with its status, unexplained
        f"custom_reward_function.path={path!r}",
        after=" when imported",
        fix="a reward file must define its function without exiting",
        error=ValueError,
    ):
        try:
            spec.loader.exec_module(module)
        except (
            Exception
        ) as e:  # whatever the module raises at import: SyntaxError, ImportError, NameError, ...
            raise ValueError(_import_error(path, e)) from e
    if not callable(getattr(module, name, None)):
        found = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise AttributeError(
            f"custom_reward_function.name={name!r}: no such function in {path} (it defines {found[:8]})"
        )
    return getattr(module, name)
