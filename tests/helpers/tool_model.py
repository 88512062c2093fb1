"""Tiny tool-calling models for tests and scripts/verl_launch_check.py, warm-started locally on
traces of the GSM8K tool (verl's `calc_gsm8k_reward`) in the rollout's own token layout
(verl_lite/data/tool_traces.py): the model learns to call the tool, read its answer and finish."""

from __future__ import annotations

import json
import os

import torch
from transformers import Qwen2ForCausalLM

from tests.helpers.models import tiny_config
from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.data.tool_chat_template import TOOL_CHAT_TEMPLATE
from verl_lite.data.tool_traces import trace_examples
from verl_lite.data.warm_start import supervised_steps


def gsm8k_tool_trace(prompt: list[dict], answer: str) -> list[dict]:
    """The prompt, a call of calc_gsm8k_reward with `answer`, the tool's reply, the final answer."""
    call = json.dumps({"name": "calc_gsm8k_reward", "arguments": {"answer": answer}})
    return [
        *prompt,
        {"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"},
        {"role": "tool", "content": f"Current parsed answer={answer!r} reward=1.0"},
        {"role": "assistant", "content": f"#### {answer}"},
    ]


def make_tool_model_dir(
    path: str,
    traces: list[list[dict]],
    tools: list[dict] | None = None,
    max_positions: int = 256,
    steps: int = 150,
    hidden: int = 64,
    seed: int = 0,
    lr: float = 3e-3,
    tokenizer=None,
    tool_format: str | None = None,
    end_tokens: tuple[str, ...] = (),
) -> str:
    """A tiny Qwen2 with the tool chat template (or `tokenizer`, with its own template), warm-started
    on `traces`, saved as a HF folder. `tool_format` and `end_tokens` as tool_traces.trace_examples
    takes them; the end tokens also stop generation (generation_config.json's eos_token_id list, which
    vLLM stops at, as gpt-oss's own folder lists <|call|>)."""
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    if tokenizer is None:
        tokenizer = build_tokenizer()
        tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    examples = [
        ex
        for trace in traces
        for ex in trace_examples(tokenizer, trace, tools, tool_format=tool_format, end_tokens=end_tokens)
    ]
    config = tiny_config(tokenizer, hidden, 2, tie_word_embeddings=True)
    config.max_position_embeddings = max_positions
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.random.fork_rng():
        supervised_steps(model, examples, tokenizer.pad_token_id, steps, lr=lr, batch_size=16, seed=seed)
    if end_tokens:
        ends = tokenizer.convert_tokens_to_ids(list(end_tokens))
        model.generation_config.eos_token_id = [tokenizer.eos_token_id, *ends]
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
