"""The embedded tool task: multiply two 2-digit numbers, with a calculator tool.

A 2-layer model with a character vocabulary cannot multiply (the single-turn demo's model only
adds); it can copy. So the task is solved by calling the calculator (verl_lite/tools/calculator.py)
in verl's hermes format and copying its result into the answer:

    user       37*58=
    assistant  <tool_call>\n{"name": "calc", "arguments": {"expression": "37*58"}}\n</tool_call>
    tool       2146
    assistant  #### 2146

The answer is scored as verl's GSM8K rule scores it (`#### <number>`, reward/scorers.py
`verl_lite/arith_tool`), so the tool's own reply never counts as an answer. The pairs 10 <= a, b < 100
are split once, by a fixed seed, into the warm start's traces, RL training and validation.

The warm start (data/tool_warm_start.py) sees both behaviours, by a seeded draw per pair: a trace
calls the calculator with probability TOOL_SHARE[0] when the first factor is below TOOL_BELOW and
TOOL_SHARE[1] otherwise, and answers at once (with the true product, which the model cannot learn to
compute) in the others. The model thus starts out calling the tool greedily for the small first
factors and guessing for most others, yet samples the call for every prompt now and then: GRPO,
through the agent loop, sees calls pay where the warm start guesses and spreads them. (The shares
depend on the prompt: with one share for all, the greedy choice is the same for every prompt and
validation starts at all or nothing; with a hard rule, as in the first version, the model never
samples a call for the other prompts and GRPO has no signal there.) The warm start also has to copy
reliably (the operands into the call, the tool's result into the answer): it trains on 2,000 pairs.
"""

from __future__ import annotations

import json
import random

from verl_lite.data import arith

DATA_SOURCE = "verl_lite/arith_tool"
TOOL_NAME = "calc"
OPERANDS = range(10, 100)
# "sft_more": more warm-start pairs, after the others so that train and test stay the first version's
SPLIT_SIZES = {"sft": 400, "train": 4000, "test": 500, "sft_more": 1600}
TOOL_BELOW = 40  # the warm start's traces call the calculator mostly when the first factor is below this
TOOL_SHARE = (0.9, 0.3)  # the share of tool traces below TOOL_BELOW and from it on
TRACE_SEED = 0

TOOL_CONFIG = {  # verl's tool config layout (tools/registry.py), written beside the parquet files
    "tools": [
        {
            "class_name": "verl_lite.tools.calculator.CalculatorTool",
            "config": {"type": "native"},
            "tool_schema": {
                "type": "function",
                "function": {
                    "name": TOOL_NAME,
                    "description": "Evaluate an arithmetic expression of integers with + - * / and parentheses.",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "expression": {"type": "string", "description": "the expression, e.g. 12*34"}
                        },
                        "required": ["expression"],
                    },
                },
            },
        }
    ]
}


def split_pairs(seed: int = 4321) -> dict[str, list[tuple[int, int]]]:
    return arith.split([(a, b) for a in OPERANDS for b in OPERANDS], SPLIT_SIZES, seed)


def question(a: int, b: int) -> str:
    return f"{a}*{b}="


def answer(a: int, b: int) -> str:
    return str(a * b)


def to_rows(pairs: list[tuple[int, int]], split: str) -> list[dict]:
    """verl's tool-agent layout (as its gsm8k_tool_agent_loop preprocessing writes it): agent_name,
    and the tool's create_kwargs under extra_info.tools_kwargs."""
    return [
        {
            "data_source": DATA_SOURCE,
            "agent_name": "tool_agent",
            "prompt": [{"role": "user", "content": question(a, b)}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer(a, b)},
            "extra_info": {
                "split": split,
                "index": i,
                "a": a,
                "b": b,
                "need_tools_kwargs": True,
                "tools_kwargs": {TOOL_NAME: {"create_kwargs": {"ground_truth": answer(a, b)}}},
            },
        }
        for i, (a, b) in enumerate(pairs)
    ]


def tool_trace(a: int, b: int) -> list[dict]:
    """The conversation of a solve with the calculator: call, the tool's reply, the answer."""
    call = json.dumps({"name": TOOL_NAME, "arguments": {"expression": question(a, b)[:-1]}})
    return [
        {"role": "user", "content": question(a, b)},
        {"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"},
        {"role": "tool", "content": answer(a, b)},
        {"role": "assistant", "content": f"#### {answer(a, b)}"},
    ]


def direct_trace(a: int, b: int) -> list[dict]:
    """The conversation of an answer without the tool."""
    return [
        {"role": "user", "content": question(a, b)},
        {"role": "assistant", "content": f"#### {answer(a, b)}"},
    ]


def warm_start_pairs() -> list[tuple[int, int]]:
    splits = split_pairs()
    return splits["sft"] + splits["sft_more"]


def warm_start_traces(
    tool_below: int = TOOL_BELOW, share: tuple[float, float] = TOOL_SHARE
) -> list[list[dict]]:
    """The warm start's traces: a seeded draw per pair picks the tool trace with probability
    share[0] when the first factor is below `tool_below`, share[1] otherwise; else the direct one."""
    rng = random.Random(TRACE_SEED)
    return [
        (tool_trace if rng.random() < share[0 if a < tool_below else 1] else direct_trace)(a, b)
        for a, b in warm_start_pairs()
    ]
