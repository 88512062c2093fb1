"""gpt-oss (harmony): calls are messages to functions.<name>; reasoning is not content."""

from verl_lite.agent_loop.parsers.gpt_oss import GptOssToolParser
from verl_lite.agent_loop.tool_parser import ToolCall

P = GptOssToolParser()
ANALYSIS = "<|channel|>analysis<|message|>The user wants the weather; call get_weather.<|end|>"


def test_one_call_after_reasoning_as_the_model_writes_it():
    # the prompt ended with <|start|>assistant: the first message of the response has no <|start|>
    text = (
        ANALYSIS + "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "San Francisco"}<|call|>'
    )
    assert P.parse(text) == ("", [ToolCall("get_weather", {"city": "San Francisco"})])


def test_several_calls_in_order_recipient_before_or_after_the_channel():
    text = (
        '<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"a": 1, "b": 2}<|call|>'
        "<|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}<|call|>"
        "<|start|>assistant<|channel|>commentary to=functions.ping<|message|><|call|>"
    )
    _, calls = P.parse(text)
    assert calls == [ToolCall("add", {"a": 1, "b": 2}), ToolCall("now", {}), ToolCall("ping", {})]


def test_no_call_the_final_answer_is_the_content():
    text = ANALYSIS + "<|start|>assistant<|channel|>final<|message|>#### 72<|return|>"
    assert P.parse(text) == ("#### 72", [])


def test_a_call_written_inside_reasoning_is_not_a_call():
    text = "<|channel|>analysis<|message|>I could send to=functions.x {} but will not.<|end|>"
    assert P.parse(text) == ("", [])


def test_malformed_calls_are_kept_with_what_is_wrong():
    text = (
        "<|channel|>commentary to=functions.add <|constrain|>json<|message|>{a: 1}<|call|>"
        "<|start|>assistant<|channel|>commentary to=functions.add <|constrain|>json<|message|>[1]<|call|>"
        '<|start|>assistant<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"a": 1}<|end|>'
        '<|start|>assistant<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"a": 1'
    )
    _, calls = P.parse(text)
    assert [c.name for c in calls] == ["add"] * 4 and all(c.error for c in calls)
    assert "not valid JSON" in calls[0].error and '"arguments" must be a JSON object' in calls[1].error
    assert calls[2].error == calls[3].error == "the call to functions.add was not ended by <|call|>"
