"""Tool calls in the model's text, in the formats `multi_turn.format` names (verl's `hermes`).

hermes (Qwen2.5, Hermes): each call is a JSON object between <tool_call> and </tool_call>:

    <tool_call>
    {"name": "calc_gsm8k_reward", "arguments": {"answer": "72"}}
    </tool_call>

The text parsed is the decoding of the model's own tokens (for reading only: those tokens are
trained as sampled, never re-encoded). Unlike verl, which logs a malformed call and drops it, a
malformed call is kept, in order, with what is wrong with it, so the loop can tell the model (a
tool-error message) instead of silently ending the episode: JSON that does not parse, an object
without a string `name` or a JSON-object `arguments`, or a <tool_call> never closed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # set for a malformed call: what the model is told


class HermesToolParser:
    START, END = "<tool_call>", "</tool_call>"
    _CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        """(the text without its tool calls, the calls in order, malformed ones included)."""
        calls = [self._call(m.group(1)) for m in self._CALL.finditer(text)]
        content = self._CALL.sub("", text)
        if self.START in content:  # opened and never closed
            calls.append(ToolCall("", error=f"a {self.START} was not closed by {self.END}"))
        return content, calls

    def _call(self, body: str) -> ToolCall:
        try:
            value = json.loads(body.strip())
        except json.JSONDecodeError as e:
            return ToolCall("", error=f"the tool call is not valid JSON ({e.msg} at char {e.pos})")
        if not isinstance(value, dict):
            return ToolCall("", error='the tool call must be a JSON object {"name": ..., "arguments": {...}}')
        name, arguments = value.get("name"), value.get("arguments", {})
        if not isinstance(name, str) or not name:
            return ToolCall("", error='the tool call has no "name" string')
        if not isinstance(arguments, dict):
            return ToolCall(name, error='the tool call\'s "arguments" must be a JSON object')
        return ToolCall(name, arguments)


TOOL_PARSERS = {"hermes": HermesToolParser}


def build_tool_parser(name: str):
    if name not in TOOL_PARSERS:
        raise ValueError(
            f"actor_rollout_ref.rollout.multi_turn.format={name!r} is not supported by verl_lite: "
            f"tool calls are parsed in {sorted(TOOL_PARSERS)} format"
        )
    return TOOL_PARSERS[name]()
