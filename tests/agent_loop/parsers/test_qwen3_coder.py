"""qwen3_coder: XML parameters, typed by the tool's schema as in verl."""

from verl_lite.agent_loop.parsers.qwen3_coder import Qwen3CoderToolParser
from verl_lite.agent_loop.tool_parser import ToolCall
from verl_lite.tools.schema import ToolSchema

P = Qwen3CoderToolParser()
WEATHER = ToolSchema.model_validate(
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "the forecast",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "metric": {"type": "boolean"},
                    "hours": {"type": "array"},
                },
                "required": ["city"],
            },
        },
    }
)
ONE = (
    "I will look it up.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n"
    "<parameter=hours>\n[6, 12]\n</parameter>\n</function>\n</tool_call><|im_end|>"
)


def test_one_call_typed_by_the_schema():
    content, calls = P.parse(ONE, [WEATHER])
    assert calls == [
        ToolCall("get_weather", {"city": "San Francisco", "days": 3, "metric": True, "hours": [6, 12]})
    ]
    assert content == "I will look it up.\n<|im_end|>"


def test_without_a_schema_values_stay_text():
    assert P.parse(ONE)[1] == [
        ToolCall("get_weather", {"city": "San Francisco", "days": "3", "metric": "true", "hours": "[6, 12]"})
    ]


def test_several_calls_in_order():
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=now>\n</function>\n</tool_call>"
    )
    assert P.parse(text, [WEATHER])[1] == [ToolCall("get_weather", {"city": "Paris"}), ToolCall("now", {})]


def test_malformed_calls_are_kept_with_what_is_wrong():
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>"
        "<tool_call>get_weather(city='Paris')</tool_call>"
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>"
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    )
    _, calls = P.parse(text, [WEATHER])
    assert calls[0] == ToolCall("get_weather", error="the parameter 'days' is not a valid integer: 'three'")
    assert calls[1].error == "the tool call has no <function=NAME>...</function>"
    assert calls[2].error == "a <parameter=...> was not closed by </parameter>"
    assert calls[3].error == "a <tool_call> was not closed by </tool_call>" and len(calls) == 4
