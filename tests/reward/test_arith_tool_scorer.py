"""The tool demo's scorer: only the model's `#### <number>` answer counts, never the tool's reply."""

from verl_lite.reward.scorers import default_compute_score

CALL = '<tool_call>\n{"name": "calc", "arguments": {"expression": "37*58"}}\n</tool_call>'
TOOL_TURN = "user\n<tool_response>\n2146\n</tool_response>\nassistant\n"  # as decoded, special tokens skipped


def test_the_answer_after_hashes_counts_not_the_tool_reply():
    score = lambda text: default_compute_score("verl_lite/arith_tool", text, "2146")  # noqa: E731
    assert score(CALL + TOOL_TURN + "#### 2146") == 1.0
    assert score(CALL + TOOL_TURN) == 0.0  # stopped after the tool's reply: no answer
    assert score(CALL + TOOL_TURN + "#### 2164") == 0.0
    assert score("#### 2146") == 1.0  # right without the tool also counts
