"""Tiny tool-calling models for tests and scripts/verl_launch_check.py, warm-started locally on
traces of the GSM8K tool (verl's `calc_gsm8k_reward`) in the rollout's own token layout
(verl_lite/data/tool_traces.py): the model learns to call the tool, read its answer and finish.

A warm start costs about a minute of one core (800 steps for the verl multi-turn scripts' model), so
a build is kept in the embedded assets' cache folder (VERL_LITE_CACHE, data/assets.py), keyed by
everything that decides its bits: the traces and settings, the source of the code that builds it,
and the numerics it ran with (torch, transformers, CPU kernels, threads). A machine that keeps its
cache folder between runs (a developer's, a CI runner's) builds each recipe once; any change to
the recipe or the code is a new key, so a stale model is never used."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import torch
from transformers import Qwen2ForCausalLM

from tests.helpers import models
from tests.helpers.models import tiny_config
from verl_lite.data import assets, chat_render, tiny_tokenizer, tool_chat_template, tool_traces, warm_start
from verl_lite.data.pinned_build import describe_pin
from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.data.tool_chat_template import TOOL_CHAT_TEMPLATE
from verl_lite.data.tool_traces import trace_examples
from verl_lite.data.warm_start import row, supervised_steps

# the code a build runs: a change to any of these files is a new cache key
_BUILD_SOURCES = (models, chat_render, tiny_tokenizer, tool_chat_template, tool_traces, warm_start)


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
    on `traces`: the cached build for this recipe (module docstring), made now if there is none,
    copied to `path`. `tool_format` and `end_tokens` as tool_traces.trace_examples takes them; the end
    tokens also stop generation (generation_config.json's eos_token_id list, which vLLM stops at, as
    gpt-oss's own folder lists <|call|>)."""
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    if tokenizer is None:
        tokenizer = build_tokenizer()
        tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    recipe = dict(
        traces=traces,
        tools=tools,
        max_positions=max_positions,
        steps=steps,
        hidden=hidden,
        seed=seed,
        lr=lr,
        tool_format=tool_format,
        end_tokens=tuple(end_tokens),
    )
    # the tokenizer by what decides its tokens: its vocabulary and rules, its template, its special tokens
    identity = [tokenizer.backend_tokenizer.to_str(), tokenizer.chat_template, tokenizer.special_tokens_map]
    built = _cached({**recipe, "tokenizer": identity}, lambda folder: _build(folder, tokenizer, **recipe))
    shutil.copytree(built, path)  # runs never write into the cache
    return path


def _cached(recipe: dict, build) -> Path:
    """The cache folder for `recipe`, built once by `build(folder)` (data/assets.build_once)."""
    digest = hashlib.sha256(json.dumps([recipe, describe_pin()], sort_keys=True, default=str).encode())
    for source in (__file__, *(module.__file__ for module in _BUILD_SOURCES)):
        digest.update(Path(source).read_bytes())
    target = assets.cache_root().parent / "test-models" / digest.hexdigest()[:20]
    return assets.build_once(target, build, "a tool-calling test model")


def _build(path, tokenizer, traces, tools, max_positions, steps, hidden, seed, lr, tool_format, end_tokens):
    rows = [
        row(*ex)
        for trace in traces
        for ex in trace_examples(tokenizer, trace, tools, tool_format=tool_format, end_tokens=end_tokens)
    ]
    config = tiny_config(tokenizer, hidden, 2, tie_word_embeddings=True)
    config.max_position_embeddings = max_positions
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.random.fork_rng():
        supervised_steps(model, rows, tokenizer.pad_token_id, steps, lr=lr, batch_size=16, seed=seed)
    if end_tokens:
        ends = tokenizer.convert_tokens_to_ids(list(end_tokens))
        model.generation_config.eos_token_id = [tokenizer.eos_token_id, *ends]
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
