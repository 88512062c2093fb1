"""Tool replies as the loop inserts them (data/chat_render.py) and warm-start traces in the same
layout (data/tool_traces.py), for gpt-oss's harmony format: verl's GptOssContinuousTokenBuilder text,
worked out by hand, where gpt-oss's template itself cannot render a reply alone."""

import jinja2
import pytest

from tests.helpers.gpt_oss_model import CALL, calc_trace, harmony_call, harmony_tokenizer
from verl_lite.data.chat_render import ChatRenderer, is_harmony
from verl_lite.data.tool_traces import trace_examples

TOK = harmony_tokenizer()


def text(ids):
    return TOK.decode(ids, skip_special_tokens=False)


def test_parallel_replies_are_written_as_verl_writes_gpt_oss_replies():
    """verl 0.9.0 writes a reply's text raw (format_gpt_oss_tool_response_manually); the bytes here
    were JSON-quoted before, which verl never did."""
    ids = ChatRenderer(TOK, harmony=True).tool_results(['7 "ok"', "x\ny"], ["calc", "search"])
    assert text(ids) == (
        '<|start|>functions.calc to=assistant<|channel|>commentary<|message|>7 "ok"<|end|>'
        "<|start|>functions.search to=assistant<|channel|>commentary<|message|>x\ny<|end|>"
        "<|start|>assistant"
    )
    assert TOK.convert_ids_to_tokens(ids[:1]) == ["<|start|>"]  # markup as its special tokens
    with pytest.raises(jinja2.TemplateError, match="needs an assistant tool call"):  # as gpt-oss's does
        ChatRenderer(TOK).tool_results(["7"], ["calc"])


def test_harmony_is_the_gpt_oss_format_or_verls_gpt_oss_model_type():
    assert is_harmony("gpt-oss") and is_harmony("hermes", "gpt_oss")
    assert not is_harmony("hermes", "qwen2") and not is_harmony(None)


def test_a_trace_ends_a_call_with_its_end_token_and_an_answer_with_eos():
    (context1, call), (context2, answer) = trace_examples(
        TOK, calc_trace(12, 34), tool_format="gpt-oss", end_tokens=(CALL,)
    )
    assert text(context1) == "<|start|>user<|message|>12*34=<|end|><|start|>assistant"
    assert text(call) == harmony_call("calc", {"expression": "12*34"})  # no <|return|> after <|call|>
    assert context2 == context1 + call + ChatRenderer(TOK, harmony=True).tool_results(["408"], ["calc"])
    assert text(answer) == "<|channel|>final<|message|>#### 408<|return|>" and answer[-1] == TOK.eos_token_id


def _calls(*names):
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": "{}"}}
            for i, n in enumerate(names)
        ],
    }


def test_appended_messages_under_harmony_are_written_as_verls_gpt_oss_builder_writes_them():
    """verl's Continuous Token helper (ct_merge_non_assistant_msg) appends messages: under harmony a run of
    tool replies is written by hand, each other message rendered alone, the generation prompt once at
    the end; a reply's function is its name, else its tool_call_id's call, else its place."""
    renderer = ChatRenderer(TOK, harmony=True)
    previous = [{"role": "user", "content": "12*34="}, _calls("calc", "search")]
    by_place = [{"role": "tool", "content": "408"}, {"role": "tool", "content": "none"}]
    reply = "<|start|>functions.{} to=assistant<|channel|>commentary<|message|>{}<|end|>"
    both = reply.format("calc", "408") + reply.format("search", "none")  # raw text, as verl 0.9.0 writes it
    assert text(renderer.appended(by_place, previous)) == both + "<|start|>assistant"
    by_id = [{"role": "tool", "content": "none", "tool_call_id": "c1"}]
    assert text(renderer.appended(by_id, previous)) == reply.format("search", "none") + "<|start|>assistant"
    then_user = [*by_place, {"role": "user", "content": "and 2*3?"}]
    assert text(renderer.appended(then_user, previous)) == (
        both + "<|start|>user<|message|>and 2*3?<|end|><|start|>assistant"
    )
    with pytest.raises(ValueError, match="tool message 0 of 1 names no function"):
        renderer.appended([{"role": "tool", "content": "408"}], previous)  # 1 reply to 2 calls, no name


def test_appended_messages_without_harmony_are_the_template_rendering():
    renderer, user = ChatRenderer(TOK), [{"role": "user", "content": "and 2*3?"}]
    assert renderer.appended(user, [{"role": "user", "content": "12*34="}]) == renderer.inserted(user)
