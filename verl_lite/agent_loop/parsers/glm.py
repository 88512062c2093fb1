"""`glm` (GLM-4.5 / 4.6): the function name, then key/value tag pairs, inside <tool_call>.

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Beijing</arg_value>
    </tool_call>

A value is JSON where it parses and text otherwise, as in verl. GLM ends a tool-calling turn with
<|observation|> rather than its EOS: the rollout stops there as vLLM does, because GLM's
generation_config.json lists it among its eos_token_id (start-up checks the model does).
Malformed: a call without a name, an <arg_key> without its <arg_value>, a <tool_call> never closed.
"""

from __future__ import annotations

import json
import re

from verl_lite.agent_loop.tool_parser import TextToolParser, ToolCall, ToolParser, tagged_blocks, unclosed

START, END, OBSERVATION = "<tool_call>", "</tool_call>", "<|observation|>"
_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


@ToolParser.register("glm")
class GlmToolParser(TextToolParser):
    STOP_TOKENS = (OBSERVATION,)  # GLM's folders list it in generation_config.json (checks.check_turn_end)

    @property
    def stop_token_ids(self) -> list[int]:
        token_id = self.tokenizer.convert_tokens_to_ids(OBSERVATION) if self.tokenizer is not None else None
        unknown = getattr(self.tokenizer, "unk_token_id", None)
        return [token_id] if isinstance(token_id, int) and token_id >= 0 and token_id != unknown else []

    def parse(self, text: str, tools: list | None = None) -> tuple[str, list[ToolCall]]:
        content, bodies, open_end = tagged_blocks(text, START, END)
        calls = [_call(body) for body in bodies]
        return content, calls + [unclosed(START, END)] * open_end


def _call(body: str) -> ToolCall:
    first = body.find("<arg_key>")
    name = (body if first < 0 else body[:first]).strip()
    if not name:
        return ToolCall("", error="the tool call has no function name before its <arg_key>s")
    pairs = _PAIR.findall(body[first:]) if first >= 0 else []
    if first >= 0 and len(pairs) != body.count("<arg_key>"):
        return ToolCall(name, error="an <arg_key> is not followed by its <arg_value>...</arg_value>")
    return ToolCall(name, {key.strip(): _value(value) for key, value in pairs})


def _value(raw: str):
    try:
        return json.loads(raw.strip())
    except json.JSONDecodeError:
        return raw.strip()
