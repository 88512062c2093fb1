"""hermes: well-formed calls in order; malformed ones kept with their error."""

from verl_lite.agent_loop.parsers.hermes import HermesToolParser
from verl_lite.agent_loop.tool_parser import ToolCall

P = HermesToolParser()


def test_calls_in_order_and_the_rest_of_the_text():
    text = (
        'Let me check.\n<tool_call>\n{"name": "calc", "arguments": {"a": "3", "b": 4}}\n</tool_call>'
        '<tool_call>{"name": "now", "arguments": {}}</tool_call>done<|im_end|>'
    )
    content, calls = P.parse(text)
    assert calls == [ToolCall("calc", {"a": "3", "b": 4}), ToolCall("now", {})]
    assert content == "Let me check.\ndone<|im_end|>"


def test_one_call_as_qwen_writes_it():
    text = '<tool_call>\n{"name": "calc_gsm8k_reward", "arguments": {"answer": "72"}}\n</tool_call><|im_end|>'
    assert P.parse(text) == ("<|im_end|>", [ToolCall("calc_gsm8k_reward", {"answer": "72"})])


def test_no_call():
    assert P.parse("#### 72") == ("#### 72", [])


def test_malformed_calls_are_kept_with_what_is_wrong():
    text = (
        "<tool_call>{not json}</tool_call>"
        "<tool_call>[1, 2]</tool_call>"
        '<tool_call>{"arguments": {}}</tool_call>'
        '<tool_call>{"name": "calc", "arguments": "{\\"a\\": 1}"}</tool_call>'
        '<tool_call>{"name": "calc", "arguments": {"a": 1}}</tool_call>'
        '<tool_call>{"name": "calc"'
    )
    _, calls = P.parse(text)
    assert [c.error is None for c in calls] == [False, False, False, False, True, False]
    assert "not valid JSON" in calls[0].error and "JSON object" in calls[1].error
    assert '"name"' in calls[2].error and '"arguments" must be a JSON object' in calls[3].error
    assert calls[4] == ToolCall("calc", {"a": 1})
    assert calls[5].error == "a <tool_call> was not closed by </tool_call>"
