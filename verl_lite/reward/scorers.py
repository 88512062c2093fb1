"""Rule-based scorers, looked up by a row's data_source, and the user's reward function.

A scorer is called as verl 0.9.1's reward managers call it, by keyword:
`compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)`, so its
parameters may come in any order (`def compute_score(solution_str, ground_truth, data_source=None,
extra_info=None, **kw)`), and it returns a number or a dict with a "score" key (other keys are
logged as extra reward info). It may be an `async def` (verl awaits it; reward/naive.py too).

A custom scorer is loaded from `custom_reward_function.path` / `.name`. Its `reward_kwargs` are
merged into every call, winning over the call's own keywords (verl's get_custom_reward_fn). A
function that cannot take verl's call (no `extra_info` parameter and no `**kwargs`, positional-only
parameters, other names) would fail in verl at its first sample with a TypeError; here the run is
refused at start-up, naming the function and the parameters it lacks.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import os
import re
import sys
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


# the keywords verl's reward managers pass (experimental/reward_loop/reward_manager/naive.py)
VERL_CALL = ("data_source", "solution_str", "ground_truth", "extra_info")
# verl's batch manager calls the function once per batch, with a list under each name
BATCH_CALL = ("data_sources", "solution_strs", "ground_truths", "extra_infos")


class RewardFunction:
    """A reward function with its reward_kwargs merged into each call (they win), as verl's
    `partial(_call_with_kwargs, raw_fn, reward_kwargs)`. `__wrapped__` is the function: its name
    and file for messages, and whether it is async (naive.is_async)."""

    def __init__(self, fn: Callable, reward_kwargs: dict):
        self.fn, self.reward_kwargs = fn, dict(reward_kwargs)
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **{**kwargs, **self.reward_kwargs})


def check_verl_call(
    fn: Callable, name: str, path: str, reward_kwargs: dict, call=VERL_CALL, positional: bool = False
) -> None:
    """ValueError when `fn` cannot take verl's keyword call (module docstring; BATCH_CALL for the
    batch manager), or, `positional`, its four values in that order (the prime manager's call)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: its first call will tell
        return
    try:
        if positional:
            signature.bind(*([None] * len(call)), **reward_kwargs)
        else:
            signature.bind(**(dict.fromkeys(call) | dict(reward_kwargs)))
    except TypeError as e:
        extra = f" plus custom_reward_function.reward_kwargs {sorted(reward_kwargs)}" if reward_kwargs else ""
        raise ValueError(
            f"custom_reward_function.name={name!r} in {path} is `{name}{signature}`, which cannot take verl's "
            f"call {name}({', '.join(f'{k}=...' for k in call)}){extra} ({e}); "
            f"give it those parameter names, e.g. `def {name}({', '.join(call[:3])}, {call[3]}=None)`, or a "
            "**kwargs"
        ) from None


def load_custom_scorer(
    path: str | None, name: str, reward_kwargs: dict | None = None, call=VERL_CALL, positional: bool = False
) -> Callable:
    """The scorer named by custom_reward_function, checked against verl's call (`call`: the
    manager's), with its reward_kwargs (module docstring); the built-in registry when path is null."""
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
    sys.modules[spec.name] = module  # as verl does: its functions pickle by name (the prime manager's pool)
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
    fn = getattr(module, name)
    check_verl_call(fn, name, path, reward_kwargs or {}, call, positional)
    return RewardFunction(fn, reward_kwargs) if reward_kwargs else fn
