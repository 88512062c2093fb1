"""The tokenization sanity check: a trajectory against its conversation rendered whole."""

from tests.agent_loop.scripted import tool_tokenizer
from verl_lite.agent_loop.sanity import first_mismatch
from verl_lite.data.chat_render import ChatRenderer

TOK = tool_tokenizer()
R = ChatRenderer(TOK)
PROMPT = [{"role": "user", "content": "3+4="}]


def ids(text):
    return TOK(text, add_special_tokens=False)["input_ids"]


def trajectory(model_text_ids, separator=True):
    """The response: a model turn (its ids as sampled, ending in EOS), an inserted user turn (after
    the template's newline, as the loop inserts it; or without, as before verl#6921), a last model turn."""
    end = ids("<|im_end|>")
    inserted = R.inserted([{"role": "user", "content": "no"}], after=end[-1] if separator else None)
    return model_text_ids + end + inserted + ids("8<|im_end|>")


MESSAGES = [
    *PROMPT,
    {"role": "assistant", "content": "7 user"},
    {"role": "user", "content": "no"},
    {"role": "assistant", "content": "8"},
]


def test_modes():
    as_template = trajectory(ids("7 user"))
    assert first_mismatch(R, MESSAGES, None, as_template, "strict") is None
    # the template puts a newline after each end of turn; dropping it is whitespace only
    dropped = trajectory(ids("7 user"), separator=False)
    assert "'\\n'" in first_mismatch(R, MESSAGES, None, dropped, "strict")
    assert first_mismatch(R, MESSAGES, None, dropped, "ignore_strippable") is None
    assert first_mismatch(R, MESSAGES, None, dropped, "disable") is None
    # the model spelled "user" letter by letter, where the tokenizer has one token: a real difference
    spelled = trajectory(ids("7 ") + [i for ch in "user" for i in ids(ch)])
    assert "user" in first_mismatch(R, MESSAGES, None, spelled, "ignore_strippable")


TOOLS = [
    {"type": "function", "function": {"name": "calc", "description": "d", "parameters": {"type": "object"}}}
]


def test_prompt_rendered_without_the_loops_tools_is_no_difference():
    """data.tool_config_path=null with a multi_turn tool config (conf/tool_demo.yaml): the dataset's
    prompt lists no tools, the loop's render would; the check compares like with like."""
    response = trajectory(ids("7 user"))
    assert first_mismatch(R, MESSAGES, TOOLS, response, "ignore_strippable") is None
    assert first_mismatch(R, MESSAGES, None, response, "ignore_strippable") is None
    spelled = trajectory(ids("7 ") + [i for ch in "user" for i in ids(ch)])
    assert "user" in first_mismatch(R, MESSAGES, TOOLS, spelled, "ignore_strippable")
