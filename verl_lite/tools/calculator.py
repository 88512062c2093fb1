"""A calculator tool (schema name of the YAML's choosing, e.g. `calc`), in verl's tool contract.

The model sends `{"expression": "37*58"}`; the tool answers with the value ("2146"). The expression
is parsed, never run as code: numbers, + - * / // %, unary signs and parentheses only, at most
MAX_CHARS characters, and no result beyond MAX_ABS (so a call cannot stall the worker). Anything
else raises ValueError, which the agent loop hands to the model as a tool error and counts.

It serves the embedded tool demo (data/arith_tool.py). With `ground_truth` in the row's
create_kwargs, `calc_reward` says whether the last value computed equals it (1.0) or not (0.0): a
signal of whether the model asked the right question, which the reward function gets as
`extra_info["rollout_reward_scores"][<tool name>]` (reward/extra_info.py); the demo's reward is the
final answer's score.
"""

from __future__ import annotations

import ast
import operator
import uuid
from decimal import Decimal, InvalidOperation
from typing import Any

from verl_lite.tools.base import BaseTool, ToolResponse, refuse_unread_keys

MAX_CHARS = 200
MAX_ABS = 10**30
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression (module docstring); ValueError for anything else."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValueError("expression must be a non-empty string, e.g. 12*34")
    if len(expression) > MAX_CHARS:
        raise ValueError(f"expression is longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot parse {expression!r} as arithmetic") from None
    return _value(tree.body)


def _value(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        try:
            result = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ValueError("division by zero") from None
        if abs(result) > MAX_ABS:
            raise ValueError(f"a value exceeds {MAX_ABS:.0e}")
        return result
    raise ValueError("only numbers, + - * / // %, signs and parentheses are allowed")


def format_value(value: int | float) -> str:
    """Integers as digits; other values without a trailing .0 when integral."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _same(value: str, ground_truth: str) -> bool:
    try:
        return Decimal(value) == Decimal(str(ground_truth))
    except InvalidOperation:
        return value == str(ground_truth)


class CalculatorTool(BaseTool):
    def __init__(self, config: dict, tool_schema):
        refuse_unread_keys(config, (), "calculator")
        super().__init__(config, tool_schema)
        self._instances: dict[str, dict[str, Any]] = {}

    async def create(
        self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs
    ) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid.uuid4())
        create_kwargs = dict(kwargs.pop("create_kwargs", None) or {})
        if ground_truth is None:
            ground_truth = create_kwargs.pop("ground_truth", None)
        unknown = sorted(set(create_kwargs) | set(kwargs))
        if unknown:
            raise ValueError(f"the calculator's create_kwargs has {unknown}; it reads only ground_truth")
        self._instances[instance_id] = {"ground_truth": ground_truth, "last": None}
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs):
        unknown = sorted(set(parameters) - {"expression"})
        if unknown:
            raise ValueError(f"unknown arguments {unknown}; the calculator takes only expression")
        text = format_value(evaluate(parameters.get("expression")))
        self._instances[instance_id]["last"] = text
        return ToolResponse(text=text), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        state = self._instances[instance_id]
        if state["ground_truth"] is None or state["last"] is None:
            return 0.0
        return 1.0 if _same(state["last"], state["ground_truth"]) else 0.0

    async def release(self, instance_id: str, **kwargs) -> None:
        self._instances.pop(instance_id, None)
