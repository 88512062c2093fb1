"""The tool agent loop on a scripted engine: a 3-turn trajectory worked out by hand (ids, mask,
log-probs, positions, the requests each turn sent), the turn batching, and every way an episode ends.
"""

import pytest
import torch

from tests.agent_loop.scripted import ScriptedRollout, prompt_batch, scripted_log_probs, tool_tokenizer
from tests.helpers.agent import VERL_GSM8K_TOOL_CONFIG, write_yaml
from tests.helpers.configs import tiny_rollout
from verl_lite.agent_loop.runner import AgentLoopRunner
from verl_lite.rollout.base import SamplingParams

P, R = 24, 400
QUESTION = [{"role": "user", "content": "3+4="}]
CALL_8 = '<tool_call>\n{"name": "calc_gsm8k_reward", "arguments": {"answer": "8"}}\n</tool_call><|im_end|>'
CALL_7 = '<tool_call>{"name": "calc_gsm8k_reward", "arguments": {"answer": "7"}}</tool_call><|im_end|>'
ANSWER = "#### 7<|im_end|>"
# what the chat template inserts after each call: the newline it writes after <|im_end|> (the model
# stops at <|im_end|>; verl#6921), the tool's words in a user turn, then the next assistant turn's
# opening (written out by hand from the template)
TOOL_8 = "\n<|im_start|>user\n<tool_response>\nCurrent parsed answer='8' reward=0.0\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
TOOL_7 = "\n<|im_start|>user\n<tool_response>\nCurrent parsed answer='7' reward=1.0\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


def rollout_cfg(tmp_path, **multi_turn):
    cfg = tiny_rollout(prompt_length=P, response_length=R)
    cfg.multi_turn.tool_config_path = write_yaml(tmp_path / "tools.yaml", VERL_GSM8K_TOOL_CONFIG)
    for key, value in multi_turn.items():
        setattr(cfg.multi_turn, key, value)
    return cfg


def run(tmp_path, scripts, n=1, rows=None, preempted=None, **multi_turn):
    tok = tool_tokenizer()
    engine = ScriptedRollout(tok, scripts)
    engine.preempted = preempted or {}
    runner = AgentLoopRunner(engine, tok, rollout_cfg(tmp_path, **multi_turn))
    rows = rows or [QUESTION] * (len(scripts) // n)
    batch = prompt_batch(
        tok,
        rows,
        P,
        agent_name=["tool_agent"] * len(rows),
        tools_kwargs=[{"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "7"}}}] * len(rows),
    )
    out = runner.run(batch, SamplingParams(n=n, temperature=1.0, response_length=R))
    return tok, engine, out


def ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_three_turns_worked_by_hand(tmp_path):
    tok, engine, out = run(tmp_path, [[CALL_8, CALL_7, ANSWER]], preempted={(0, 1): 1, (0, 3): 2})
    m1, t1, m2, t2, m3 = (ids(tok, s) for s in (CALL_8, TOOL_8, CALL_7, TOOL_7, ANSWER))
    # the spans, counted by hand: one token per character, except <|im_start|> (12 characters),
    # <|im_end|> (10) and the words user (4) and assistant (9), one token each:
    # CALL_8 94 - 9 = 85, CALL_7 92 - 9 = 83, ANSWER 16 - 9 = 7, TOOL_* 120 - 2 * 11 - 9 - 3 - 8 = 78
    assert (len(CALL_8), len(CALL_7), len(ANSWER), len(TOOL_8), len(TOOL_7)) == (94, 92, 16, 120, 120)
    assert (len(m1), len(m2), len(m3), len(t1), len(t2)) == (85, 83, 7, 78, 78)
    prompt = ids(tok, tok.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False))
    b = out.batch
    n = len(m1 + t1 + m2 + t2 + m3)
    assert b["responses"][0, :n].tolist() == m1 + t1 + m2 + t2 + m3
    assert (b["responses"][0, n:] == tok.pad_token_id).all()
    assert n == 331
    mask = [1] * 85 + [0] * 78 + [1] * 83 + [0] * 78 + [1] * 7 + [0] * (R - n)
    assert b["response_mask"][0].tolist() == mask
    logps = scripted_log_probs(0, 0, 85) + [0.0] * 78 + scripted_log_probs(0, 1, 83) + [0.0] * 78
    logps += scripted_log_probs(0, 2, 7) + [0.0] * (R - n)
    assert torch.allclose(b["rollout_log_probs"][0], torch.tensor(logps), atol=0, rtol=0)
    # attention on every real token; positions run on across the turns, as in generation
    assert b["attention_mask"][0].tolist() == [0] * (P - len(prompt)) + [1] * (len(prompt) + n) + [0] * (
        R - n
    )
    assert b["position_ids"][0, P - len(prompt) : P + n].tolist() == list(range(len(prompt) + n))
    assert b["input_ids"][0, P - len(prompt) :].tolist()[: len(prompt)] == prompt
    # token-in: each turn's request is the prompt and everything so far, as ids; budgets shrink
    requests = [call[0] for call in engine.calls]
    assert [list(r.prompt_ids) for r in requests] == [prompt, prompt + m1 + t1, prompt + m1 + t1 + m2 + t2]
    assert [r.max_tokens for r in requests] == [R, R - 85 - 78, R - 85 - 78 - 83 - 78]
    nt = out.non_tensor_batch
    assert nt["__num_turns__"].tolist() == [6]  # 3 assistant + 2 tool (user) turns + 1
    assert nt["tool_call_counts"].tolist() == [2]
    # verl's names: each call's step reward (8: no improvement, -0.05; then 7: 0.0), calc_reward by tool
    assert nt["tool_rewards"][0] == [-0.05, 0.0] and nt["turn_scores"][0] == []
    assert nt["reward_scores"][0] == {"calc_gsm8k_reward": 1.0, "user_turn_rewards": []}
    stats = nt["agent_loop_stats"][0]
    assert (stats["tool_errors"], stats["tool_timeouts"], stats["tool_dropped"]) == (0, 0, 0)
    # verl's count over the turns: the engine preempted turn 1 once, said nothing of turn 2, turn 3 twice
    assert stats["num_preempted"] == 1 + 0 + 2


def test_each_turn_is_one_engine_call_over_the_unfinished_trajectories(tmp_path):
    scripts = [[ANSWER], [CALL_8, ANSWER], [CALL_8, CALL_7, ANSWER], [CALL_7, ANSWER]]
    _, engine, out = run(tmp_path, scripts, n=2, rows=[QUESTION, QUESTION])
    assert [sorted(r.key[0] for r in call) for call in engine.calls] == [[0, 1, 2, 3], [1, 2, 3], [2]]
    assert out.non_tensor_batch["__num_turns__"].tolist() == [2, 4, 6, 4]
    assert out.meta_info["metrics"]["agent_loop/engine_calls"] == 3


def test_a_malformed_call_is_answered_and_the_episode_goes_on(tmp_path):
    tok, engine, out = run(tmp_path, [["<tool_call>{oops}</tool_call><|im_end|>", ANSWER]])
    error = ids(
        tok, "<|im_start|>user\n<tool_response>\nError executing tool: the tool call is not valid JSON"
    )
    second = list(engine.calls[1][0].prompt_ids)
    assert any(second[i : i + len(error)] == error for i in range(len(second)))
    stats = out.non_tensor_batch["agent_loop_stats"][0]
    assert (stats["tool_malformed"], stats["tool_errors"], stats["num_tool_calls"]) == (1, 1, 0)
    assert out.non_tensor_batch["__num_turns__"].tolist() == [4]


@pytest.mark.parametrize(
    "limits, scripts, turns, requests",
    [
        ({"max_assistant_turns": 2}, [CALL_8, CALL_8, CALL_8], 4, 2),  # 2 assistant + 1 tool + 1
        ({"max_user_turns": 1}, [CALL_8, CALL_8, CALL_8], 4, 2),
        ({"max_parallel_calls": 1}, [CALL_8.replace("<|im_end|>", "") + CALL_7, ANSWER], 4, 2),
    ],
)
def test_turn_limits(tmp_path, limits, scripts, turns, requests):
    _, engine, out = run(tmp_path, [scripts], **limits)
    assert out.non_tensor_batch["__num_turns__"].tolist() == [turns] and len(engine.calls) == requests
    dropped = out.non_tensor_batch["agent_loop_stats"][0]["tool_dropped"]
    assert dropped == (1 if "max_parallel_calls" in limits else 0)


def test_the_response_never_exceeds_response_length(tmp_path):
    """A tool result that would not fit ends the episode without being inserted; a long turn is cut."""
    tok = tool_tokenizer()
    cut = len(ids(tok, CALL_8)) + 10  # room for the call, not for its 71-token result
    engine = ScriptedRollout(tok, [[CALL_8, ANSWER], ["x" * 500]])
    cfg = rollout_cfg(tmp_path)
    cfg.response_length = cut  # before the runner exists: a worker's config is final (frozen) by then
    runner = AgentLoopRunner(engine, tok, cfg)
    batch = prompt_batch(
        tok,
        [QUESTION, QUESTION],
        P,
        agent_name=["tool_agent"] * 2,
        tools_kwargs=[{"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "7"}}}] * 2,
    )
    out = runner.run(batch, SamplingParams(n=1, response_length=cut))
    assert out.batch["responses"].shape[1] == cut
    assert out.batch["response_mask"][0].tolist() == [1] * (cut - 10) + [0] * 10
    assert out.batch["response_mask"][1].tolist() == [1] * cut  # cut at the budget
    assert out.non_tensor_batch["__num_turns__"].tolist() == [2, 2]


def test_a_tool_that_raises_or_hangs_is_a_message_and_the_rollout_goes_on(tmp_path):
    """At run time: the model is told, the failure is counted, the batch comes back."""
    from tests.helpers.agent import tool_entry, user_tool

    tok = tool_tokenizer()
    config = {
        "tools": [
            tool_entry(user_tool("SleepTool"), "sleep", {"seconds": "s"}),
            tool_entry(user_tool("RaisingTool"), "fail"),
        ]
    }
    cfg = rollout_cfg(tmp_path, tool_call_timeout=0.5)
    cfg.multi_turn.tool_config_path = write_yaml(tmp_path / "bad_tools.yaml", config)
    hang = '<tool_call>{"name": "sleep", "arguments": {"seconds": "30"}}</tool_call><|im_end|>'
    fail = '<tool_call>{"name": "fail", "arguments": {}}</tool_call><|im_end|>'
    engine = ScriptedRollout(tok, [[hang, ANSWER], [fail, ANSWER]])
    batch = prompt_batch(tok, [QUESTION, QUESTION], P, agent_name=["tool_agent"] * 2)
    out = AgentLoopRunner(engine, tok, cfg).run(batch, SamplingParams(n=1, response_length=R))
    keys = [[r.key for r in call] for call in engine.calls]
    # the failed call's answer did not wait for the hung one's timeout (scheduler.py)
    assert keys == [[(0, 1), (1, 1)], [(1, 2)], [(0, 2)]], keys
    told = [tok.decode(list(call[0].prompt_ids)) for call in engine.calls[2:0:-1]]
    assert "Error executing tool 'sleep': did not finish within 0.5 s" in told[0]
    assert "Error executing tool 'fail': RuntimeError: the service is down" in told[1]
    stats = out.non_tensor_batch["agent_loop_stats"]
    assert (stats[0]["tool_timeouts"], stats[1]["tool_errors"]) == (1, 1)
    assert out.non_tensor_batch["__num_turns__"].tolist() == [4, 4]


def test_a_subclass_setting_verls_max_parallel_calls_in_init_is_obeyed(tmp_path):
    """verl's ToolAgentLoop keeps its limits as attributes set in __init__ (tool_agent_loop.py), which a
    subclass may change; verl_lite's run() reads them (max_parallel_calls is 5 in the config here)."""
    tok = tool_tokenizer()
    cfg = rollout_cfg(tmp_path, max_parallel_calls=5)
    cfg.agent.agent_loop_config_path = write_yaml(
        tmp_path / "loops.yaml",
        [{"name": "one_call", "_target_": "tests.agent_loop.user_loops.FewerParallelCalls"}],
    )
    engine = ScriptedRollout(tok, [[CALL_8.removesuffix("<|im_end|>") + CALL_7, ANSWER]])
    batch = prompt_batch(
        tok,
        [QUESTION],
        P,
        agent_name=["one_call"],
        tools_kwargs=[{"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "7"}}}],
    )
    out = AgentLoopRunner(engine, tok, cfg).run(
        batch, SamplingParams(n=1, temperature=1.0, response_length=R)
    )
    stats = out.non_tensor_batch["agent_loop_stats"][0]
    assert (stats["num_tool_calls"], stats["tool_dropped"]) == (1, 1)
