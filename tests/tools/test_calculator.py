"""The calculator tool of the tool demo: values, what it refuses (never running code), its reward."""

import asyncio

import pytest

from tests.helpers.agent import schema
from verl_lite.tools.calculator import CalculatorTool, evaluate
from verl_lite.tools.schema import ToolSchema


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def tool():
    return CalculatorTool({"type": "native"}, ToolSchema.from_dict(schema("calc", {"expression": "e"})))


@pytest.mark.parametrize(
    "expression, value",
    [("37*58", 2146), (" 2 + 3*(4-1) ", 11), ("-7//2", -4), ("7/2", 3.5), ("17 % 5", 2), ("1.5*2", 3.0)],
)
def test_evaluates_arithmetic(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    "expression, message",
    [
        ("__import__('os').system('true')", "only numbers"),
        ("2**8", "only numbers"),  # powers could build huge numbers: refused
        ("x+1", "only numbers"),
        ("1/0", "division by zero"),
        ("9" * 16 + "*" + "9" * 16, "exceeds"),
        ("3 +", "cannot parse"),
        ("", "non-empty"),
        ("1+" * 150 + "1", "longer than"),
    ],
)
def test_refuses_anything_else_with_a_message(expression, message):
    with pytest.raises(ValueError, match=message):
        evaluate(expression)


def test_answers_calls_and_rewards_the_right_question(tool):
    a, _ = run(tool.create(create_kwargs={"ground_truth": "2146"}))
    b, _ = run(tool.create(create_kwargs={}))
    assert run(tool.calc_reward(a)) == 0.0  # nothing computed yet
    response, step, _ = run(tool.execute(a, {"expression": "37*57"}))
    assert response.text == "2109" and step == 0.0 and run(tool.calc_reward(a)) == 0.0
    response, _, _ = run(tool.execute(a, {"expression": "37*58"}))
    assert response.text == "2146" and run(tool.calc_reward(a)) == 1.0
    assert run(tool.execute(b, {"expression": "4/2"}))[0].text == "2"  # integral: no trailing .0
    assert run(tool.calc_reward(b)) == 0.0  # no ground truth given
    run(tool.release(a))
    with pytest.raises(KeyError):
        run(tool.calc_reward(a))


def test_unknown_arguments_and_kwargs_are_named(tool):
    a, _ = run(tool.create())
    with pytest.raises(ValueError, match=r"unknown arguments \['expr'\]"):
        run(tool.execute(a, {"expr": "1+1"}))
    with pytest.raises(ValueError, match=r"create_kwargs has \['answer'\]"):
        run(tool.create(create_kwargs={"answer": "1"}))
    with pytest.raises(ValueError, match=r"config has keys \['precision'\]"):
        CalculatorTool({"type": "native", "precision": 3}, tool.tool_schema)
