"""Supervised warm starts on multi-turn tool-call traces, in exactly the token layout of a rollout.

A trace is a chat conversation: the prompt's messages, then assistant turns (their text, tool calls
written in it, e.g. `<tool_call>{...}</tool_call>`) and the tool or user messages between them.
`trace_examples` turns it into (context ids, target ids) pairs, one per assistant turn, building the
context the way a rollout builds it: the prompt rendered by the chat template (with `tools`) as the
dataset renders it, each assistant turn as its text plus EOS (the tokens the model would sample),
each run of tool / user messages rendered alone (data/chat_render.ChatRenderer.inserted, what the
agent loop inserts). So the model learns from the very sequences it will see in training.
data/warm_start.supervised_steps trains on such pairs (loss on the targets only), seeded.

Used to build tool-calling models locally (no hub): the embedded tool demo's, and the tiny models
tests and scripts/verl_launch_check.py run verl's multi-turn scripts with.
"""

from __future__ import annotations

from verl_lite.data.chat_render import ChatRenderer


def trace_examples(
    tokenizer, messages: list[dict], tools: list[dict] | None = None, chat_template_kwargs: dict | None = None
) -> list[tuple[list[int], list[int]]]:
    """(context, target) per assistant turn of `messages` (module docstring)."""
    renderer = ChatRenderer(tokenizer, chat_template_kwargs)
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first is None or first == 0:
        raise ValueError("a trace needs prompt messages followed by at least one assistant turn")
    ids = renderer.ids(messages[:first], add_generation_prompt=True, tools=tools)
    examples, inserted = [], []
    for message in messages[first:]:
        if message["role"] != "assistant":
            inserted.append(message)
            continue
        if inserted:
            ids = ids + renderer.inserted(inserted)
            inserted = []
        target = tokenizer(message["content"] + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
        examples.append((list(ids), target))
        ids = ids + target
    return examples
