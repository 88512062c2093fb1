"""The tool demo's embedded assets (conf/tool_demo.yaml): rows in verl's tool-agent layout, the
calculator's tool config, a model whose template renders tool calls and tool turns, and a warm
start that leaves room: greedy, it calls the tool for part of the prompts, multiplies nothing by
itself, and solves part of the task, not all."""

import os

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl_lite.agent_loop.parsers.hermes import HermesToolParser
from verl_lite.data import arith_tool
from verl_lite.data.chat_render import ChatRenderer
from verl_lite.data.tool_traces import trace_examples
from verl_lite.reward.scorers import score_arith_tool
from verl_lite.tools.calculator import CalculatorTool, evaluate, format_value
from verl_lite.tools.registry import build_tools

pytestmark = pytest.mark.slow  # builds the model (a short supervised run) on first use


def test_rows_are_verls_tool_agent_layout_and_splits_disjoint(tool_demo_assets):
    _, data = tool_demo_assets
    splits = {k: set(v) for k, v in arith_tool.split_pairs().items()}
    assert not (splits["sft"] & splits["train"]) and not (splits["train"] & splits["test"])
    assert not (splits["sft"] & splits["test"])
    for split in ("train", "test"):
        frame = pd.read_parquet(os.path.join(data, f"{split}.parquet"))
        assert len(frame) == arith_tool.SPLIT_SIZES[split]
        row = frame.iloc[0]
        a, b = row["extra_info"]["a"], row["extra_info"]["b"]
        assert row["agent_name"] == "tool_agent" and row["extra_info"]["need_tools_kwargs"]
        assert row["prompt"][0]["content"] == f"{a}*{b}=" and row["reward_model"]["ground_truth"] == str(
            a * b
        )
        assert row["extra_info"]["tools_kwargs"]["calc"]["create_kwargs"]["ground_truth"] == str(a * b)


def test_tool_config_builds_the_calculator(tool_demo_assets):
    tools = build_tools(os.path.join(tool_demo_assets[1], "tool_config.yaml"))
    assert list(tools) == ["calc"] and isinstance(tools["calc"], CalculatorTool)


def test_model_template_renders_tool_calls_and_tool_turns(tool_demo_assets):
    tok = AutoTokenizer.from_pretrained(tool_demo_assets[0])
    messages = arith_tool.tool_trace(37, 58)
    text = tok.apply_chat_template(messages, tokenize=False)
    assert '<tool_call>\n{"name": "calc", "arguments": {"expression": "37*58"}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\n2146\n</tool_response><|im_end|>" in text
    context, target = trace_examples(tok, messages)[-1]  # the answer's context: prompt, call, tool turn
    assert tok.decode(target) == "#### 2146<|im_end|>" and len(context) + len(target) <= 16 + 160


def _greedy(model, tok, prompts: list[list[int]], max_new: int) -> list[list[int]]:
    width = max(map(len, prompts))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts])
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=(ids != tok.pad_token_id).long(),
            max_new_tokens=max_new,
            do_sample=False,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
    rows = [
        r[: r.index(tok.eos_token_id) + 1] if tok.eos_token_id in r else r for r in out[:, width:].tolist()
    ]
    return [[t for t in r if t != tok.pad_token_id] for r in rows]


def test_warm_start_calls_the_tool_for_part_and_cannot_multiply_alone(tool_demo_assets):
    """What the tool agent loop does, greedily, on 100 validation prompts (one tool turn)."""
    tok = AutoTokenizer.from_pretrained(tool_demo_assets[0])
    model = AutoModelForCausalLM.from_pretrained(tool_demo_assets[0]).eval()
    renderer, parser = ChatRenderer(tok), HermesToolParser()
    pairs = arith_tool.split_pairs()["test"][:100]
    prompts = [renderer.ids([{"role": "user", "content": arith_tool.question(a, b)}], True) for a, b in pairs]
    firsts = _greedy(model, tok, prompts, 100)
    called, direct = [], []
    for i, first in enumerate(firsts):
        calls = parser.parse(tok.decode(first))[1]
        (called if calls else direct).append(i)
    tool_turns = []
    for i in called:
        call = parser.parse(tok.decode(firsts[i]))[1][0]
        try:
            value = format_value(evaluate(call.arguments.get("expression")))
        except (ValueError, TypeError, AttributeError):
            value = "error"
        # as the loop inserts it: after the turn separator when the call ended at <|im_end|>
        tool_turns.append(renderer.inserted([{"role": "tool", "content": value}], after=firsts[i][-1]))
    seconds = _greedy(model, tok, [prompts[i] + firsts[i] + t for i, t in zip(called, tool_turns)], 12)
    texts = {i: tok.decode(firsts[i], skip_special_tokens=True) for i in direct}
    for i, t, s in zip(called, tool_turns, seconds):
        texts[i] = tok.decode(firsts[i] + t + s, skip_special_tokens=True)
    scores = [score_arith_tool("", texts[i], str(a * b)) for i, (a, b) in enumerate(pairs)]
    assert 0.05 <= len(called) / 100 <= 0.95, f"calls the tool for {len(called)} of 100 prompts"
    assert sum(scores[i] for i in direct) <= 0.05 * max(len(direct), 1), "multiplies without the tool"
    # the warm start copies the operands into the call and the tool's result into the answer often
    # enough that calls pay (arith_tool.py): else GRPO sees little reward for calling
    assert sum(scores[i] for i in called) >= 0.25 * len(called), "calls the tool but rarely copies its result"
    assert 0 < sum(scores) / 100 <= 0.6, (
        f"greedy reward {sum(scores) / 100}: none solved, or no room for GRPO"
    )
