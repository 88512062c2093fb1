"""utils/scores.py: the one check of a score that enters the loss, at the agent loop's reward_score."""

import math

import numpy as np
import pytest

from verl_lite.agent_loop.base import AgentLoopOutput
from verl_lite.utils.scores import finite_score


@pytest.mark.parametrize(
    "value, expected",
    [(1, 1.0), (-2.5, -2.5), (np.float32(0.5), 0.5), (np.int64(3), 3.0), (np.float64(-1.0), -1.0)],
)
def test_python_and_numpy_numbers_are_scores(value, expected):
    assert finite_score(value) == expected and type(finite_score(value)) is float


@pytest.mark.parametrize(
    "value", [True, np.bool_(True), math.nan, math.inf, np.float32("nan"), 10**400, "1.0", None, [1.0]]
)
def test_bools_non_finite_and_non_numbers_are_not(value):
    assert finite_score(value) is None


def _output(score) -> AgentLoopOutput:
    return AgentLoopOutput([1, 2], [3], [1], [0.0], num_turns=2, reward_score=score)


def test_a_loop_reward_score_of_numpy_is_taken_and_true_or_a_huge_int_is_one_line():
    _output(np.float32(0.25)).check("output 0")  # refused before: not an int or float
    with pytest.raises(ValueError) as info:
        _output(True).check("output 0")
    assert str(info.value) == (
        "output 0: reward_score=True must be a finite number, not a bool (or None: the reward function scores it)"
    )
    with pytest.raises(ValueError) as info:  # math.isfinite(10**400) raised OverflowError
        _output(10**400).check("output 0")
    assert str(info.value).startswith(
        "output 0: reward_score=an integer of 401 digits must be a finite number"
    )
