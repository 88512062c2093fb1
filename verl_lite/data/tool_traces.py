"""Supervised warm starts on multi-turn tool-call traces, in exactly the token layout of a rollout.

A trace is a chat conversation: the prompt's messages, then assistant turns (their text, tool calls
written in it, e.g. `<tool_call>{...}</tool_call>`) and the tool or user messages between them.
`trace_examples` turns it into (context ids, target ids) pairs, one per assistant turn, building the
context the way a rollout builds it: the prompt rendered by the chat template (with `tools`) as the
dataset renders it, each assistant turn as its text plus EOS (the tokens the model would sample),
each run of tool / user messages rendered alone after the turn separator (data/chat_render.ChatRenderer.inserted, what the
agent loop inserts; tool replies as ChatRenderer.tool_results writes them for `tool_format`, each
to the tool its message names). An assistant turn that already ends with one of `end_tokens` (a
format's own end of a tool-calling turn, gpt-oss's <|call|>) gets no EOS after it. So the model
learns from the very sequences it will see in training.
data/warm_start.supervised_steps trains on such pairs (warm_start.row: loss on the targets only),
seeded; or on `trace_row`: the whole trace as one row, the loss on every assistant turn (each turn's
context is a prefix of the next one's, so one row carries every pair at the cost of the longest).

Used to build tool-calling models locally (no hub): the embedded tool demo's, and the tiny models
tests and scripts/verl_launch_check.py run verl's multi-turn scripts with.
"""

from __future__ import annotations

from verl_lite.data.chat_render import ChatRenderer, is_harmony


def trace_examples(
    tokenizer,
    messages: list[dict],
    tools: list[dict] | None = None,
    chat_template_kwargs: dict | None = None,
    tool_format: str | None = None,
    end_tokens: tuple[str, ...] = (),
) -> list[tuple[list[int], list[int]]]:
    """(context, target) per assistant turn of `messages` (module docstring)."""
    renderer = ChatRenderer(tokenizer, chat_template_kwargs, is_harmony(tool_format))
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
            ids = ids + _inserted(renderer, inserted, ids[-1])
            inserted = []
        text = message["content"]
        end = "" if text.endswith(end_tokens) and end_tokens else tokenizer.eos_token
        target = tokenizer(text + end, add_special_tokens=False)["input_ids"]
        examples.append((list(ids), target))
        ids = ids + target
    return examples


def trace_row(tokenizer, messages: list[dict], **kwargs) -> tuple[list[int], list[int]]:
    """(ids, labels) of the whole trace: trace_examples' pairs in one row, labels -100 except on
    every assistant turn's target (kwargs as trace_examples takes them)."""
    examples = trace_examples(tokenizer, messages, **kwargs)
    context, target = examples[-1]
    ids = context + target
    labels = [-100] * len(ids)
    for context, target in examples:
        labels[len(context) : len(context) + len(target)] = target
    return ids, labels


def _inserted(renderer: ChatRenderer, messages: list[dict], after: int) -> list[int]:
    """A run of tool messages as the loop inserts tool results; any other run rendered alone; both
    after the turn separator when `after` is the template's closing token."""
    if all(m["role"] == "tool" for m in messages):
        names = [m.get("name", "") for m in messages]
        return renderer.tool_results([m["content"] for m in messages], names, after)
    return renderer.inserted(messages, after)
