"""Agent loops written against verl's AgentLoopBase run unchanged on the real rollout (issue 37 part 2).

The user's file verl_style_loops.py is what a verl user writes (imports from `verl.*`, `@register`,
verl's constructor taking `*args, **kwargs` plus a YAML key, `self.server_manager.generate(request_id=...)`,
AgentLoopOutput by keywords with AgentLoopMetrics). One loop uses verl 0.9.0's Continuous Token
helpers, the other verl 0.9.0's `apply_chat_template(remove_system_prompt=True)` and
`system_prompt`. Both run through the real runner on the HF reference rollout of the tiny model;
every token at mask 1 in the batch is the engine's sampled token with its log-prob, every request
was the dataset's prompt plus the response so far (so the loops rendered the prompt as the dataset
did), and what the loops read from verl's attributes (self.config, the YAML key) reaches the batch.
"""

import pytest
import torch

from tests.agent_loop.scripted import ScriptedRollout, prompt_batch, scripted_log_probs, tool_tokenizer
from tests.helpers.agent import tool_entry, write_yaml
from tests.helpers.configs import tiny_model, tiny_rollout
from verl_lite.agent_loop.base import AgentLoopOutput
from verl_lite.agent_loop.runner import AgentLoopRunner
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.rollout.base import SamplingParams
from verl_lite.utils.verl_paths import verl_installed

pytestmark = pytest.mark.skipif(verl_installed(), reason="verl is installed: its own classes answer")
P, R = 16, 40
QUESTIONS = ["3+4=", "25+17=", "60+31="]

LOOPS = "tests.agent_loop.verl_style_loops"


class Recorder:
    """The rollout's generate_requests, recording every (request, result) the engine itself gave."""

    def __init__(self, rollout):
        self.inner, self.calls = rollout.generate_requests, []

    def __call__(self, requests, call):
        results, active = self.inner(requests, call)
        self.calls += list(zip(requests, results))
        return results, active


def loops_yaml(path) -> str:
    return write_yaml(
        path,
        [
            {"name": "ask_twice", "_target_": f"{LOOPS}.AskTwiceAgentLoop", "follow_up": "Are you sure?"},
            {"name": "legacy_again", "_target_": f"{LOOPS}.AgainAgentLoop"},
        ],
    )


def test_verl_style_loops_train_token_exact_on_the_hf_rollout(tmp_path, tiny_model_dir):
    from verl_lite.rollout.hf_rollout import HFRollout

    tok = tool_tokenizer()
    rollout = HFRollout(tiny_model(tiny_model_dir), tiny_rollout(seed=5), tok, rank=0)
    recorder = rollout.generate_requests = Recorder(rollout)
    cfg = tiny_rollout(prompt_length=P, response_length=R)
    cfg.agent.agent_loop_config_path = loops_yaml(tmp_path / "loops.yaml")
    trainer = PPOTrainerConfig()  # the whole config, as the worker passes it
    trainer.actor_rollout_ref.model.path, trainer.actor_rollout_ref.rollout = tiny_model_dir, cfg
    runner = AgentLoopRunner(rollout, tok, cfg, trainer_config=trainer)
    names = ["ask_twice", "legacy_again", "ask_twice"]
    batch = prompt_batch(tok, [[{"role": "user", "content": q}] for q in QUESTIONS], P, agent_name=names)
    out = runner.run(batch, SamplingParams(n=2, temperature=1.0, response_length=R))

    b, nt = out.batch, out.non_tensor_batch
    by_trajectory: dict[int, list] = {}
    for request, result in recorder.calls:
        by_trajectory.setdefault(request.key[0], []).append((request, result))
    assert sorted(by_trajectory) == list(range(6))
    assert [len(by_trajectory[t]) for t in (0, 1, 4, 5)] == [2] * 4, "ask_twice generates twice"
    for t, pairs in by_trajectory.items():
        row = t // 2
        prompt = batch.batch["input_ids"][row][batch.batch["attention_mask"][row].bool()].tolist()
        response = b["responses"][t].tolist()
        sampled = torch.zeros(R, dtype=torch.long)
        for request, result in pairs:
            offset = len(request.prompt_ids) - len(prompt)
            # legacy_again cuts its output at R: a request past the window is checked up to it
            within = list(request.prompt_ids)[: len(prompt) + R]
            assert within == prompt + response[:offset], f"trajectory {t}: re-encoded input"
            end = min(offset + len(result.token_ids), R)
            assert response[offset:end] == result.token_ids[: end - offset], (
                f"trajectory {t}: not the sampled ids"
            )
            assert torch.equal(
                b["rollout_log_probs"][t][offset:end], torch.tensor(result.log_probs[: end - offset])
            )
            sampled[offset:end] = 1
        assert torch.equal(b["response_mask"][t], sampled), (
            f"trajectory {t}: mask 1 exactly at the engine's tokens"
        )
        if len(pairs) == 2:
            inserted = (1 - sampled)[: len(pairs[1][0].prompt_ids) - len(prompt)].sum()
            assert inserted > 0, f"trajectory {t}: the follow-up turn was inserted at mask 0"
    follow_up = tok("Are you sure?", add_special_tokens=False)["input_ids"]
    first = by_trajectory[0]
    between = list(first[1][0].prompt_ids[len(first[0][0].prompt_ids) + len(first[0][1].token_ids) :])
    assert any(between[i : i + len(follow_up)] == follow_up for i in range(len(between))), "the YAML key"
    assert nt["__num_turns__"].tolist() == [4] * 6
    extras = list(nt["tool_extra_fields"])
    assert extras[0]["model_path"] == tiny_model_dir, extras[0]  # self.config: the trainer config
    assert extras[2]["processor"] is None and extras[2]["system_prompt_len"] == len(
        runner.context.renderer.system_prefix
    )


def test_what_a_text_trainer_cannot_hold_is_refused_by_name():
    """verl's multimodal and MoE fields: accepted empty (verl's loops set them so), refused when set."""
    AgentLoopOutput(prompt_ids=[1], response_ids=[2], response_mask=[1], multi_modal_data={}).check("t")
    with pytest.raises(ValueError, match="t: AgentLoopOutput.routed_experts is set, which is not supported"):
        AgentLoopOutput(prompt_ids=[1], response_ids=[2], response_mask=[1], routed_experts=[[0]]).check("t")
    with pytest.raises(ValueError, match="multi_modal_data is set.*text models only"):
        AgentLoopOutput([1], [2], [1], multi_modal_data={"images": ["x"]}).check("t")


class SessionTool:
    """A tool in verl 0.9's style: execute(instance_id, parameters, agent_data=...) reads the history
    and keeps session data in agent_data.extra_fields."""

    def __init__(self, config, tool_schema):
        self.tool_schema, self.name = tool_schema, tool_schema.function.name

    async def create(self, instance_id=None, **kwargs):
        return "i", None

    async def execute(self, instance_id, parameters, agent_data=None):
        from verl.tools.schemas import ToolResponse

        seen = agent_data.extra_fields.setdefault("seen", [])
        seen.append([agent_data.assistant_turns, len(agent_data.messages), agent_data.request_id != ""])
        # the stream (prompt and response so far) ends with the last generation, as in verl
        done = agent_data.prompt_ids[-len(agent_data.response_ids) :] == agent_data.response_ids
        return ToolResponse(text=f"turn {agent_data.assistant_turns} {done}"), 0.5, {}

    async def calc_reward(self, instance_id, **kwargs):
        return 0.0

    async def release(self, instance_id, **kwargs):
        return None


def test_agent_data_reaches_execute_and_its_extra_fields_reach_the_batch(tmp_path):
    """verl's ToolAgentLoop passes AgentData to execute(agent_data=...) and returns its extra_fields."""
    tok = tool_tokenizer()
    call = '<tool_call>{"name": "session", "arguments": {}}</tool_call><|im_end|>'
    engine = ScriptedRollout(tok, [[call, call, "done<|im_end|>"]])
    cfg = tiny_rollout(prompt_length=P, response_length=400)
    tools = [tool_entry(f"{__name__}.SessionTool", "session")]
    cfg.multi_turn.tool_config_path = write_yaml(tmp_path / "t.yaml", {"tools": tools})
    runner = AgentLoopRunner(engine, tok, cfg)
    batch = prompt_batch(tok, [[{"role": "user", "content": "3+4="}]], P, agent_name=["tool_agent"])
    out = runner.run(batch, SamplingParams(n=1, temperature=1.0, response_length=400))
    extra = out.non_tensor_batch["tool_extra_fields"][0]
    # at each call: the assistant turns so far, the messages so far (user, assistant[, tool, assistant])
    assert extra["seen"] == [[1, 2, True], [2, 4, True]]
    assert out.non_tensor_batch["tool_rewards"][0] == [0.5, 0.5]
    text = tok.decode(out.batch["responses"][0][out.batch["attention_mask"][0, P:].bool()])
    assert "turn 1 True" in text and "turn 2 True" in text


def test_the_frozen_trainer_config_is_the_loops_self_config():
    """The worker hands loops the final, frozen config (FrozenList / FrozenDict inside): a verl loop
    reads it as verl's DictConfig (attribute access, `.get`), read-only."""
    from omegaconf import OmegaConf

    from verl_lite.agent_loop.verl_args import config_tree
    from verl_lite.config.compose import load_config
    from verl_lite.config.freeze import freeze

    config = freeze(load_config(["data.train_files=[a.parquet,b.parquet]"], config_name="demo"))
    tree = config_tree(config)
    assert list(tree.data.train_files) == ["a.parquet", "b.parquet"]
    assert (
        tree.actor_rollout_ref.rollout.get("prompt_length") == config.actor_rollout_ref.rollout.prompt_length
    )
    assert OmegaConf.is_readonly(tree)


def test_verls_own_single_turn_loop_runs_as_it_is(tmp_path):
    """verl 0.9.1's SingleTurnAgentLoop source (verl_single_turn_agent_loop.py: its imports of
    simple_timer, rollout_trace_op and TokenOutput, its multimodal no-ops, request_id, priority,
    ct_* helpers, metrics) through the real runner: the dataset's prompt in, the engine's tokens out."""
    tok = tool_tokenizer()
    engine = ScriptedRollout(tok, [["7 is the answer<|im_end|>"], ["no<|im_end|>"]])
    cfg = tiny_rollout(prompt_length=P, response_length=R)
    cfg.agent.agent_loop_config_path = write_yaml(
        tmp_path / "loops.yaml",
        [
            {
                "name": "verl_single_turn_agent",
                "_target_": "tests.agent_loop.verl_single_turn_agent_loop.SingleTurnAgentLoop",
            }
        ],
    )
    engine.preempted = {(0, 1): 2}  # the engine preempted trajectory 0's request twice; 1's: unsaid
    runner = AgentLoopRunner(engine, tok, cfg)
    batch = prompt_batch(
        tok, [[{"role": "user", "content": "3+4="}]] * 2, P, agent_name=["verl_single_turn_agent"] * 2
    )
    out = runner.run(batch, SamplingParams(n=1, temperature=1.0, response_length=R))
    prompt = batch.batch["input_ids"][0][batch.batch["attention_mask"][0].bool()].tolist()
    (requests,) = engine.calls
    assert [list(r.prompt_ids) for r in requests] == [prompt, prompt] and requests[0].max_tokens == R
    for t, text in enumerate(["7 is the answer<|im_end|>", "no<|im_end|>"]):
        want = tok(text, add_special_tokens=False)["input_ids"]
        n = len(want)
        assert out.batch["responses"][t][:n].tolist() == want and out.batch["response_mask"][t].sum() == n
        assert torch.allclose(
            out.batch["rollout_log_probs"][t][:n], torch.tensor(scripted_log_probs(t, 0, n))
        )
    assert out.non_tensor_batch["__num_turns__"].tolist() == [2, 2]
    # verl's metrics, as the loop sets them from TokenOutput.num_preempted (-1: the engine did not say)
    stats = out.non_tensor_batch["agent_loop_stats"]
    assert [s["num_preempted"] for s in stats] == [2, -1] and stats[0]["generate_sequences"] >= 0


def test_a_loop_with_verls_exact_constructor_parameters_builds_and_reads_verls_attributes(tmp_path):
    """verl 0.9.0 builds a loop with exactly trainer_config, server_manager, tokenizer, processor,
    dataset_cls, data_config and tools: a loop listing them without **kwargs runs (no `context` or
    `hf_model_type` keyword); it reads enable_continuous_token and turn_separator as verl's loops do,
    and its metrics["tool_calls"] (verl's simple_timer) is the step's timing_s/agent_loop/tool_calls."""
    from verl_lite.agent_loop.metrics import compute_agent_loop_metrics

    tok = tool_tokenizer()
    engine = ScriptedRollout(tok, [["7<|im_end|>", "yes<|im_end|>"]])
    cfg = tiny_rollout(prompt_length=P, response_length=R)
    cfg.agent.agent_loop_config_path = write_yaml(
        tmp_path / "loops.yaml", [{"name": "exact", "_target_": f"{LOOPS}.ExactSignatureLoop"}]
    )
    runner = AgentLoopRunner(engine, tok, cfg)
    batch = prompt_batch(tok, [[{"role": "user", "content": "3+4="}]], P, agent_name=["exact"])
    out = runner.run(batch, SamplingParams(n=1, temperature=1.0, response_length=R))
    separator = tok("\n", add_special_tokens=False)["input_ids"]
    assert out.non_tensor_batch["tool_extra_fields"][0]["turn_separator"] == separator
    second = list(engine.calls[1][0].prompt_ids)
    first = tok("7<|im_end|>", add_special_tokens=False)["input_ids"]
    at = second.index(first[-1]) + 1
    assert second[at : at + len(separator)] == separator, "the separator follows <|im_end|>"
    metrics = compute_agent_loop_metrics(out)
    assert metrics["timing_s/agent_loop/tool_calls/min"] >= 0.05, metrics
