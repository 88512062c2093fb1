"""glm (GLM-4.5/4.6): name, then <arg_key>/<arg_value> pairs; values JSON where they parse."""

from verl_lite.agent_loop.parsers.glm import GlmToolParser
from verl_lite.agent_loop.tool_parser import ToolCall
from verl_lite.data.tiny_tokenizer import build_tokenizer

P = GlmToolParser()


def test_one_call_as_glm_writes_it():
    text = (
        "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
    )
    assert P.parse(text) == ("\n", [ToolCall("get_weather", {"city": "Beijing", "days": 3})])


def test_several_calls_in_order_and_a_call_without_arguments():
    text = (
        "<tool_call>add\n<arg_key>xs</arg_key>\n<arg_value>[1, 2]</arg_value>\n</tool_call>"
        "<tool_call>now</tool_call>"
    )
    assert P.parse(text)[1] == [ToolCall("add", {"xs": [1, 2]}), ToolCall("now", {})]


def test_malformed_calls_are_kept_with_what_is_wrong():
    text = (
        "<tool_call><arg_key>a</arg_key><arg_value>1</arg_value></tool_call>"
        "<tool_call>add<arg_key>a</arg_key></tool_call>"
        "<tool_call>add<arg_key>a</arg_key><arg_value>1</arg_value>"
    )
    _, calls = P.parse(text)
    assert calls[0].error == "the tool call has no function name before its <arg_key>s"
    assert calls[1] == ToolCall("add", error="an <arg_key> is not followed by its <arg_value>...</arg_value>")
    assert calls[2].error == "a <tool_call> was not closed by </tool_call>"


def test_observation_stops_generation_where_the_tokenizer_has_it():
    tok = build_tokenizer()
    assert GlmToolParser(tok).stop_token_ids == []
    tok.add_special_tokens({"additional_special_tokens": ["<|observation|>"]})
    assert GlmToolParser(tok).stop_token_ids == [tok.convert_tokens_to_ids("<|observation|>")]
