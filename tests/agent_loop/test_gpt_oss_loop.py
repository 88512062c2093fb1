"""The tool agent loop in gpt-oss's harmony format, on a scripted engine, worked out by hand: the
model's call ends with <|call|> (the token its folder stops at), the gpt-oss parser reads it, verl's
GSM8K tool runs it, and the reply goes in as verl writes a gpt-oss tool reply (data/chat_render.py),
masked; the final answer ends with EOS (<|return|>)."""

from tests.agent_loop.scripted import ScriptedRollout, prompt_batch
from tests.helpers.agent import VERL_GSM8K_TOOL_CONFIG, write_yaml
from tests.helpers.configs import tiny_rollout
from tests.helpers.gpt_oss_model import harmony_call, harmony_tokenizer
from verl_lite.agent_loop.runner import AgentLoopRunner
from verl_lite.rollout.base import SamplingParams

P, R = 16, 300
QUESTION = [{"role": "user", "content": "3+4="}]
CALL = harmony_call("calc_gsm8k_reward", {"answer": "7"})
ANSWER = "<|channel|>final<|message|>#### 7<|return|>"
# verl 0.9.0's gpt-oss reply (agent_loop/utils.py format_gpt_oss_tool_response_manually, and its
# GptOssContinuousTokenBuilder): the tool's text as it is (it was JSON-quoted here before; verl never
# quoted it), then the generation prompt
REPLY = (
    "<|start|>functions.calc_gsm8k_reward to=assistant<|channel|>commentary<|message|>"
    "Current parsed answer='7' reward=1.0<|end|><|start|>assistant"
)


def test_a_harmony_call_is_parsed_run_and_answered_in_harmony_masked(tmp_path):
    tok = harmony_tokenizer()
    cfg = tiny_rollout(prompt_length=P, response_length=R)
    cfg.multi_turn.tool_config_path = write_yaml(tmp_path / "tools.yaml", VERL_GSM8K_TOOL_CONFIG)
    cfg.multi_turn.format = "gpt-oss"
    engine = ScriptedRollout(tok, [[CALL, ANSWER]])
    batch = prompt_batch(
        tok,
        [QUESTION],
        P,
        agent_name=["tool_agent"],
        tools_kwargs=[{"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "7"}}}],
    )
    out = AgentLoopRunner(engine, tok, cfg).run(
        batch, SamplingParams(n=1, temperature=1.0, response_length=R)
    )
    m1, reply, m2 = (tok(s, add_special_tokens=False)["input_ids"] for s in (CALL, REPLY, ANSWER))
    # the markup is one token per harmony token: <|call|> and <|return|> end the model's turns
    assert m1[-1] == tok.convert_tokens_to_ids("<|call|>") and m2[-1] == tok.eos_token_id
    n = len(m1 + reply + m2)
    b, nt = out.batch, out.non_tensor_batch
    assert b["responses"][0, :n].tolist() == m1 + reply + m2
    assert b["response_mask"][0].tolist() == [1] * len(m1) + [0] * len(reply) + [1] * len(m2) + [0] * (R - n)
    # the second turn continued from exactly the prompt, the call and the reply
    prompt = tok(tok.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False))["input_ids"]
    assert [list(c[0].prompt_ids) for c in engine.calls] == [prompt, prompt + m1 + reply]
    assert nt["tool_call_counts"].tolist() == [1] and nt["__num_turns__"].tolist() == [4]
    assert nt["reward_scores"][0]["calc_gsm8k_reward"] == 1.0  # the parsed answer reached the tool
    assert nt["agent_loop_stats"][0]["tool_errors"] == 0
