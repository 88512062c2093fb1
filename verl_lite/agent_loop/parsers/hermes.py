"""`hermes` (Qwen2.5, Qwen3, Hermes; verl's default): each call a JSON object between tags.

    <tool_call>
    {"name": "calc_gsm8k_reward", "arguments": {"answer": "72"}}
    </tool_call>

Malformed: JSON that does not parse, an object without a string `name` or a JSON-object
`arguments`, or a <tool_call> never closed.
"""

from __future__ import annotations

import json

from verl_lite.agent_loop.tool_parser import (
    TextToolParser,
    ToolCall,
    ToolParser,
    json_call,
    tagged_blocks,
    unclosed,
)

START, END = "<tool_call>", "</tool_call>"


@ToolParser.register("hermes")
class HermesToolParser(TextToolParser):
    def parse(self, text: str, tools: list | None = None) -> tuple[str, list[ToolCall]]:
        content, bodies, open_end = tagged_blocks(text, START, END)
        calls = [_call(body) for body in bodies]
        return content, calls + [unclosed(START, END)] * open_end


def _call(body: str) -> ToolCall:
    try:
        value = json.loads(body.strip())
    except json.JSONDecodeError as e:
        return ToolCall("", error=f"the tool call is not valid JSON ({e.msg} at char {e.pos})")
    if not isinstance(value, dict):
        return ToolCall("", error='the tool call must be a JSON object {"name": ..., "arguments": {...}}')
    return json_call(value.get("name"), value.get("arguments", {}))
