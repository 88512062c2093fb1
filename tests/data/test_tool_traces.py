"""Warm-start rows from tool-call traces (data/tool_traces.py): the rollout's own token layout, the
turn separator included, and the whole trace as one row with the loss on every assistant turn."""

from verl_lite.data import arith_tool
from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.data.tool_chat_template import TOOL_CHAT_TEMPLATE
from verl_lite.data.tool_traces import trace_examples, trace_row
from verl_lite.data.warm_start import row


def tokenizer():
    tok = build_tokenizer()
    tok.chat_template = TOOL_CHAT_TEMPLATE
    return tok


def test_the_answer_s_context_is_the_rollout_s_with_the_turn_separator():
    tok = tokenizer()
    (call_context, call), (answer_context, answer) = trace_examples(tok, arith_tool.tool_trace(37, 58))
    text = tok.decode(answer_context)
    assert tok.decode(call).endswith("</tool_call><|im_end|>") and tok.decode(answer) == "#### 2146<|im_end|>"
    # the model stops at <|im_end|>; the loop inserts the template's "\n" before the tool's turn
    assert text.endswith(
        "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n2146\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert answer_context[: len(call_context) + len(call)] == call_context + call


def test_a_trace_row_carries_every_pair_in_one_sequence():
    tok = tokenizer()
    trace = arith_tool.tool_trace(37, 58)
    ids, labels = trace_row(tok, trace)
    pairs = trace_examples(tok, trace)
    assert ids == pairs[-1][0] + pairs[-1][1]
    learnt = [i for i, label in enumerate(labels) if label != -100]
    spans = [range(len(c), len(c) + len(t)) for c, t in pairs]
    assert learnt == [i for span in spans for i in span]
    assert [labels[i] for i in learnt] == [tok_id for _, t in pairs for tok_id in t]
    # a one-turn trace is the pair's own row
    direct = arith_tool.direct_trace(37, 58)
    assert trace_row(tok, direct) == row(*trace_examples(tok, direct)[0])
