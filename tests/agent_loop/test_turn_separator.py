"""The turn separator (data/chat_render.py): the tool agent loop's multi-turn ids equal what verl
0.9.1 builds for a Qwen ChatML template, and the whole conversation rendered at once.

verl 0.9.1's rule, restated from verl/utils/tokenizer/continuous_token.py (the model type qwen2 of
the tiny model picks QwenContinuousTokenBuilder): an assistant turn is appended as sampled
(`merge_assistant_tokens`); a tool turn is the suffix the template adds to a synthetic
[system, user, assistant-with-the-calls] conversation when the tool messages and the generation
prompt follow (`_tokenize_tool_group` / `render_delta_token_id`), after a `\n` (mask 0) when the ids
so far end with `<|im_end|>` (`QwenContinuousTokenBuilder._merge_context_token_ids`, the fix of
verl-project/verl#6921).
"""

from tests.agent_loop.scripted import ScriptedRollout, prompt_batch, tool_tokenizer
from tests.agent_loop.test_tool_agent import ANSWER, CALL_7, CALL_8, QUESTION, rollout_cfg
from verl_lite.agent_loop.runner import AgentLoopRunner
from verl_lite.data.chat_render import ChatRenderer
from verl_lite.rollout.base import SamplingParams

P, R = 24, 400
TOOL_TEXT = {CALL_8: "Current parsed answer='8' reward=0.0", CALL_7: "Current parsed answer='7' reward=1.0"}
SYNTHETIC = [
    {"role": "system", "content": "continuous token synthetic system"},
    {"role": "user", "content": "continuous token synthetic user"},
]


def ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def verl_tool_turn(tok, runtime: list[int], tool_messages: list[dict], tools) -> tuple[list[int], list[int]]:
    """(ids, mask) that verl 0.9.1's Qwen builder appends to `runtime` for a tool turn."""
    calls = [
        {
            "id": f"continuous_token_call_{i}",
            "type": "function",
            "function": {"name": "continuous_token_tool", "arguments": {}},
        }
        for i in range(len(tool_messages))
    ]
    assistant = {"role": "assistant", "content": "", "reasoning_content": "reasoning", "tool_calls": calls}
    prefix = tok.apply_chat_template(
        [*SYNTHETIC, assistant], tokenize=False, add_generation_prompt=False, tools=tools
    )
    full = tok.apply_chat_template(
        [*SYNTHETIC, assistant, *tool_messages], tokenize=False, add_generation_prompt=True, tools=tools
    )
    prefix_ids, full_ids = ids(tok, prefix), ids(tok, full)
    assert full_ids[: len(prefix_ids)] == prefix_ids
    delta = full_ids[len(prefix_ids) :]
    newline = [ids(tok, "\n")[0]] if runtime[-1] == tok.convert_tokens_to_ids("<|im_end|>") else []
    return newline + delta, [0] * len(newline + delta)


def verl_trajectory(tok, prompt: list[int], turns: list[str], tools) -> tuple[list[int], list[int]]:
    """The response ids and mask verl 0.9.1 builds: each scripted turn, then its tool's answer."""
    runtime, mask = list(prompt), []
    for k, turn in enumerate(turns):
        runtime += ids(tok, turn)
        mask += [1] * len(ids(tok, turn))
        if k < len(turns) - 1:
            context, context_mask = verl_tool_turn(
                tok, runtime, [{"role": "tool", "content": TOOL_TEXT[turn]}], tools
            )
            runtime += context
            mask += context_mask
    return runtime[len(prompt) :], mask


def test_multi_turn_ids_are_verl_091s_for_a_qwen_template(tmp_path):
    tok = tool_tokenizer()
    no_end = CALL_8.removesuffix("<|im_end|>")  # a turn that stopped elsewhere: no separator, as verl
    TOOL_TEXT[no_end] = TOOL_TEXT[CALL_8]
    scripts = [[CALL_8, CALL_7, ANSWER], [no_end, ANSWER]]
    runner = AgentLoopRunner(ScriptedRollout(tok, scripts), tok, rollout_cfg(tmp_path))
    batch = prompt_batch(
        tok,
        [QUESTION, QUESTION],
        P,
        agent_name=["tool_agent"] * 2,
        tools_kwargs=[{"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "7"}}}] * 2,
    )
    out = runner.run(batch, SamplingParams(n=1, temperature=1.0, response_length=R))
    prompt = ids(tok, tok.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False))
    tools = runner.context.tool_schemas
    for row, turns in enumerate(scripts):
        want_ids, want_mask = verl_trajectory(tok, prompt, turns, tools)
        n = len(want_ids)
        assert out.batch["responses"][row, :n].tolist() == want_ids
        assert out.batch["response_mask"][row, :n].tolist() == want_mask
        assert not out.batch["attention_mask"][row, P + n :].any()
    # the separator is there (row 0: after each <|im_end|>) and not where the turn did not end with it
    newline = ids(tok, "\n")[0]
    first_tool = out.batch["responses"][0, len(ids(tok, CALL_8))].item()
    assert first_tool == newline
    assert out.batch["responses"][1, len(ids(tok, no_end))].item() == tok.convert_tokens_to_ids(
        "<|im_start|>"
    )


def test_the_trajectory_is_the_whole_conversation_rendered_at_once():
    """verl#6921's parity: prompt + (model turn, separator, tool turn)* + last turn + its separator
    == apply_chat_template of the conversation."""
    tok = tool_tokenizer()
    renderer = ChatRenderer(tok)
    assert tok.convert_ids_to_tokens([renderer.turn_close]) == ["<|im_end|>"]
    assert renderer.turn_separator == ids(tok, "\n")
    tool = {"role": "tool", "content": "42"}
    conversation = [
        *QUESTION,
        {"role": "assistant", "content": "call"},
        tool,
        {"role": "assistant", "content": "#### 42"},
    ]
    trajectory = ids(tok, tok.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False))
    trajectory += ids(tok, "call<|im_end|>")
    trajectory += renderer.inserted([tool], after=trajectory[-1])
    trajectory += ids(tok, "#### 42<|im_end|>") + renderer.turn_separator
    assert trajectory == renderer.ids(conversation, add_generation_prompt=False)
    # without the closing token the separator is not added
    assert renderer.inserted([tool], after=ids(tok, "x")[0]) == renderer.inserted([tool])


def test_verls_continuous_token_merge_reports_the_separator_as_inserted():
    """verl 0.9.0's ct_merge_non_assistant_msg on a Qwen template: `\\n` after <|im_end|> in
    inserted_token_ids (mask 0, log-prob 0), not counted in appended_token_count; nothing after a
    turn that did not end at <|im_end|>."""
    import asyncio
    from types import SimpleNamespace

    from verl_lite.agent_loop.verl_helpers import VerlHelpers

    tok = tool_tokenizer()
    renderer = ChatRenderer(tok)
    helpers = VerlHelpers()
    helpers.context = SimpleNamespace(renderer=renderer)
    previous = [*QUESTION, {"role": "assistant", "content": "7"}]
    follow_up = {"role": "user", "content": "Sure?"}
    body = renderer.inserted([follow_up])
    prompt = ids(tok, tok.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False))
    for turn, separator in (("7<|im_end|>", ids(tok, "\n")), ("7", [])):
        runtime = prompt + ids(tok, turn)
        n = len(ids(tok, turn))
        merged, mask, logprobs = asyncio.run(
            helpers.ct_merge_non_assistant_msg(previous, [*previous, follow_up], runtime, [1] * n, [-0.5] * n)
        )
        assert merged.inserted_token_ids == separator
        assert merged.token_ids == runtime + separator + body
        assert merged.appended_token_count == len(body)
        assert mask == [1] * n + [0] * (len(separator) + len(body))
        assert logprobs == [-0.5] * n + [0.0] * (len(separator) + len(body))
