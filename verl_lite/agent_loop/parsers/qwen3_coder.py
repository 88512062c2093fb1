"""`qwen3_coder` (Qwen3-Coder, Qwen3.5): XML-style calls, one <parameter=...> per argument.

    <tool_call>
    <function=get_weather>
    <parameter=city>
    San Francisco
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

A value is text; the tool's schema (the `tools` the loop passes) gives its type, as in verl: string
as written, integer, number, boolean, and JSON for the rest; a parameter the schema does not know
stays text. One newline after the opening and before the closing tag belongs to the layout.
Malformed (kept with the error, where verl falls back to the text): a value its declared type cannot
read, a <tool_call> without a <function=...>...</function>, or a tag never closed.
"""

from __future__ import annotations

import json
import re

from verl_lite.agent_loop.tool_parser import TextToolParser, ToolCall, ToolParser, tagged_blocks, unclosed

START, END = "<tool_call>", "</tool_call>"
_FUNCTION = re.compile(r"<function=([^>\n]*)>(.*?)</function>", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]*)>\n?(.*?)\n?</parameter>", re.DOTALL)


@ToolParser.register("qwen3_coder")
class Qwen3CoderToolParser(TextToolParser):
    def parse(self, text: str, tools: list | None = None) -> tuple[str, list[ToolCall]]:
        types = _parameter_types(tools)
        content, bodies, open_end = tagged_blocks(text, START, END)
        calls = [_call(body, types) for body in bodies]
        return content, calls + [unclosed(START, END)] * open_end


def _parameter_types(tools: list | None) -> dict[str, dict[str, str]]:
    """{tool name: {parameter: JSON-schema type}} of verl's tool schemas (models or dicts)."""
    types = {}
    for tool in tools or []:
        schema = tool.model_dump() if hasattr(tool, "model_dump") else tool
        function = schema.get("function") or {}
        properties = (function.get("parameters") or {}).get("properties") or {}
        types[function.get("name")] = {k: str((v or {}).get("type", "string")) for k, v in properties.items()}
    return types


def _call(body: str, types: dict[str, dict[str, str]]) -> ToolCall:
    function = _FUNCTION.search(body)
    if function is None:
        return ToolCall("", error="the tool call has no <function=NAME>...</function>")
    name = function.group(1).strip()
    if not name:
        return ToolCall("", error="the tool call's <function=...> has no name")
    arguments = {}
    for key, raw in _PARAMETER.findall(function.group(2)):
        key, declared = key.strip(), types.get(name, {}).get(key.strip(), "string")
        try:
            arguments[key] = _value(raw, declared)
        except ValueError:
            return ToolCall(name, error=f"the parameter {key!r} is not a valid {declared}: {raw!r}")
    if "<parameter=" in _PARAMETER.sub("", function.group(2)):
        return ToolCall(name, error="a <parameter=...> was not closed by </parameter>")
    return ToolCall(name, arguments)


def _value(raw: str, declared: str):
    if raw.strip().lower() == "null":
        return None
    if declared in ("string", "str", "text", "enum"):
        return raw
    if declared.startswith(("int", "uint", "long")):
        return int(raw.strip())
    if declared.startswith(("num", "float")):
        number = float(raw.strip())
        return int(number) if number.is_integer() else number
    if declared in ("boolean", "bool"):
        if raw.strip().lower() not in ("true", "false"):
            raise ValueError(raw)
        return raw.strip().lower() == "true"
    try:  # object, array and any other type: the JSON the model wrote
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(raw) from e
