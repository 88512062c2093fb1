"""`gpt-oss` (OpenAI's harmony format): a call is a message addressed to `functions.<name>`.

    <|channel|>analysis<|message|>Need the weather.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "SF"}<|call|>

The prompt ends with `<|start|>assistant`, so the response's first message has no <|start|>; the
recipient may also stand before the channel (`<|start|>assistant to=functions.x<|channel|>...`), as
harmony allows. Messages end with <|end|>, <|call|> or <|return|>. The content is what the model
wrote on the other channels but analysis (its reasoning, which may mention calls that are not calls).
Malformed: arguments that are not a JSON object, a call not ended by <|call|>.
"""

from __future__ import annotations

import json
import re

from verl_lite.agent_loop.tool_parser import TextToolParser, ToolCall, ToolParser, json_call

START, MESSAGE, CALL = "<|start|>", "<|message|>", "<|call|>"
_END = re.compile(r"<\|(end|call|return)\|>")
_RECIPIENT = re.compile(r"to=functions\.([^\s<]+)")
_CHANNEL = re.compile(r"<\|channel\|>\s*(\w+)")


@ToolParser.register("gpt-oss")
class GptOssToolParser(TextToolParser):
    STOP_TOKENS = (CALL,)  # gpt-oss's generation_config.json lists it (agent_loop/checks.check_turn_end)

    def parse(self, text: str, tools: list | None = None) -> tuple[str, list[ToolCall]]:
        content, calls = [], []
        for header, body, end in _messages(text):
            recipient, channel = _RECIPIENT.search(header), _CHANNEL.search(header)
            if recipient:
                calls.append(_call(recipient.group(1), body, end))
            elif not (channel and channel.group(1) == "analysis"):
                content.append(body)
        return "".join(content), calls


def _messages(text: str):
    """(header, body, end token or None when the text stops first) of each message in order."""
    at = 0
    while (m := text.find(MESSAGE, at)) >= 0:
        header = text[at:m].split(START)[-1].removeprefix("assistant")
        end = _END.search(text, m + len(MESSAGE))
        stop = end.start() if end else len(text)
        yield header, text[m + len(MESSAGE) : stop], end.group(0) if end else None
        if end is None:
            return
        at = end.end()


def _call(name: str, body: str, end: str | None) -> ToolCall:
    if end != CALL:
        return ToolCall(name, error=f"the call to functions.{name} was not ended by {CALL}")
    try:
        value = json.loads(body.strip()) if body.strip() else {}
    except json.JSONDecodeError as e:
        return ToolCall(
            name,
            error=f"the tool call's arguments are not valid JSON ({e.msg} at char {e.pos})",
            bad_arguments=True,
        )
    return json_call(name, value)
