"""A tiny gpt-oss-format model: the tiny tokenizer with OpenAI's harmony special tokens and a chat
template in gpt-oss's layout, warm-started (tool_model.make_tool_model_dir) on traces of the tool
demo's calculator written in harmony, so that it calls `calc` as gpt-oss calls a function:

    <|start|>user<|message|>12*34=<|end|><|start|>assistant
    <|channel|>analysis<|message|>Use calc.<|end|><|start|>assistant<|channel|>commentary to=functions.calc <|constrain|>json<|message|>{"expression": "12*34"}<|call|>
    <|start|>functions.calc to=assistant<|channel|>commentary<|message|>408<|end|><|start|>assistant
    <|channel|>final<|message|>#### 408<|return|>

As in gpt-oss's own folder: EOS is <|return|>, generation_config.json also stops at <|call|>, and a
tool reply's sender is the function the assistant's call before it named (the template raises
without one, as gpt-oss's does; the loop writes replies itself, data/chat_render.py), and a call in
the history is written as gpt-oss's template writes it (`<|start|>assistant to=functions.NAME...`). Unlike gpt-oss's template it adds no system message (the date,
the reasoning effort, the channels): a character vocabulary would make it ~200 tokens.
"""

from __future__ import annotations

import json

from tests.helpers.tool_model import make_tool_model_dir
from verl_lite.data import arith_tool
from verl_lite.data.tiny_tokenizer import build_tokenizer

HARMONY_TOKENS = [
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
    "<|constrain|>",
    "<|call|>",
    "<|return|>",
]
CALL, RETURN = "<|call|>", "<|return|>"

HARMONY_TEMPLATE = (
    "{%- set ns = namespace(last_call=none) %}"
    "{%- if tools %}"
    "{{- '<|start|>developer<|message|># Tools\\n\\nnamespace functions {\\n' }}"
    "{%- for tool in tools %}{%- set f = tool['function'] if tool['function'] is defined else tool %}"
    "{{- 'type ' + f['name'] + ' = (_: any) => any;\\n' }}{%- endfor %}"
    "{{- '}<|end|>' }}"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m['role'] == 'assistant' and m['tool_calls'] %}"
    "{%- for call in m['tool_calls'] %}{%- set f = call['function'] if call['function'] is defined else call %}"
    "{{- '<|start|>assistant to=functions.' + f['name'] + '<|channel|>commentary json<|message|>' }}"
    "{{- f['arguments'] if f['arguments'] is string else f['arguments'] | tojson }}{{- '<|call|>' }}"
    "{%- set ns.last_call = f['name'] %}{%- endfor %}"
    "{%- elif m['role'] == 'assistant' %}"
    "{{- '<|start|>assistant<|channel|>final<|message|>' + m['content'] + '<|end|>' }}"
    "{%- elif m['role'] == 'tool' %}"
    "{%- if ns.last_call is none %}"
    "{{- raise_exception('a tool message needs an assistant tool call before it') }}"
    "{%- endif %}"
    "{{- '<|start|>functions.' + ns.last_call + ' to=assistant<|channel|>commentary<|message|>' }}"
    "{{- m['content'] | tojson + '<|end|>' }}"
    "{%- else %}"
    "{{- '<|start|>' + m['role'] + '<|message|>' + m['content'] + '<|end|>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}"
)


def harmony_tokenizer():
    """The tiny tokenizer with the harmony tokens as special tokens, EOS <|return|>, the template."""
    tokenizer = build_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": HARMONY_TOKENS})
    tokenizer.eos_token = RETURN
    tokenizer.chat_template = HARMONY_TEMPLATE
    return tokenizer


def harmony_call(name: str, arguments: dict) -> str:
    """An assistant turn (after the prompt's `<|start|>assistant`) that reasons a line, as gpt-oss
    does, then calls `name` in a message of its own, ended by <|call|>: the layout verl's parser reads."""
    return (
        f"<|channel|>analysis<|message|>Use {name}.<|end|><|start|>assistant<|channel|>commentary "
        f"to=functions.{name} <|constrain|>json<|message|>{json.dumps(arguments)}{CALL}"
    )


def calc_trace(a: int, b: int) -> list[dict]:
    """The tool demo's solve (arith_tool.tool_trace) in harmony: call, the reply, the final answer."""
    question, answer = arith_tool.question(a, b), arith_tool.answer(a, b)
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": harmony_call(arith_tool.TOOL_NAME, {"expression": question[:-1]})},
        {"role": "tool", "name": arith_tool.TOOL_NAME, "content": answer},
        {"role": "assistant", "content": f"<|channel|>final<|message|>#### {answer}"},  # + EOS <|return|>
    ]


def make_gpt_oss_model_dir(path: str, pairs: list[tuple[int, int]], steps: int = 200) -> str:
    """The warm-started model folder (cached: an existing folder is returned as it is)."""
    return make_tool_model_dir(
        path,
        [calc_trace(a, b) for a, b in pairs],
        steps=steps,
        tokenizer=harmony_tokenizer(),
        tool_format="gpt-oss",
        end_tokens=(CALL,),
    )


def calculator_model_dir(path: str) -> str:
    """The model tests/test_main_ppo_gpt_oss.py runs: warm-started on 300 of the tool demo's SFT pairs."""
    return make_gpt_oss_model_dir(path, arith_tool.split_pairs()["sft"][:300], steps=300)
