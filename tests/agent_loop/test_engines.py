"""Multi-turn rollouts on the real engines (HF generate and vLLM on CPU) beside an FSDP2 actor.

A mixed batch runs through the agent loops: `tool_agent` with a user simulator (the warm-started
arithmetic model answers, is told "no", answers again...), a user loop from agent_loop_config_path
(three short turns with text inserted between them), `single_turn_agent`, and a row without
agent_name (the default loop). Checked against what the engine itself returned, call by call:
every request carried exactly the prompt and the response so far as ids; the trained tokens at
mask 1 are exactly the engine's output ids, its log-probs exactly the rollout log-probs; nothing
at mask 0 came from the engine. The actor's recomputed log-probs of the sampled tokens match the
engine's (the rollout/actor log-prob metric on a multi-turn batch). One vLLM engine for the module.
"""

import datetime
import gc
import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from tests.agent_loop.scripted import prompt_batch, tool_tokenizer
from tests.helpers.agent import write_yaml
from tests.helpers.configs import fp32_fsdp, tiny_model, tiny_rollout
from tests.helpers.dist import free_port
from verl_lite.agent_loop.base import count_preempted
from verl_lite.agent_loop.metrics import compute_agent_loop_metrics
from verl_lite.agent_loop.runner import AgentLoopRunner
from verl_lite.config.schema import TINY_MODEL, OptimConfig
from verl_lite.data import assets
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.rollout.base import SamplingParams, compute_logprob_diff_metrics
from verl_lite.workers.actor import compute_log_prob

P, R = 16, 40
QUESTIONS = ["3+4=", "25+17=", "60+31=", "8+80="]
AGENTS = ["tool_agent", "echo", "single_turn_agent", None]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(actor engine, {backend: rollout}, model config) in one process and one gloo group."""
    saved_env = dict(os.environ)
    os.environ.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())
    )
    dist.init_process_group("gloo", rank=0, world_size=1, timeout=datetime.timedelta(seconds=120))
    model_cfg = tiny_model(assets.resolve(TINY_MODEL))
    actor = FSDPEngine(
        model_cfg, fp32_fsdp(), init_device_mesh("cpu", (1,)), role="actor", optim_cfg=OptimConfig(lr=1e-3)
    )
    from verl_lite.rollout.hf_rollout import HFRollout

    tok = tool_tokenizer()
    rollouts = {"hf": HFRollout(model_cfg, tiny_rollout(seed=5), tok, rank=0)}
    try:
        from verl_lite.rollout.vllm_rollout import VLLMRollout

        cfg = tiny_rollout(seed=5, cpu_kv_cache_gb=0.25, max_model_len=P + R, load_format="auto")
        rollouts["vllm"] = VLLMRollout(model_cfg, cfg, tok, rank=0)
    except ImportError:
        pass
    yield actor, rollouts, tmp_path_factory.mktemp("agent_configs")
    vllm = rollouts.pop("vllm", None)
    if (
        vllm is not None
    ):  # vLLM's shutdown destroys its groups, so a later engine in this process starts clean
        del vllm.llm
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()
    os.environ.clear()
    os.environ.update(saved_env)


class Recorder:
    """The rollout's generate_requests, recording every request and result (the engine's own)."""

    def __init__(self, rollout):
        self.rollout, self.calls = rollout, []
        self.inner = rollout.generate_requests

    def __call__(self, requests, call):
        results, active = self.inner(requests, call)
        self.calls.append(list(zip(requests, results)))
        return results, active


def run_mixed(rollout, config_dir, n=2, temperature=1.0):
    tok = tool_tokenizer()
    cfg = tiny_rollout(prompt_length=P, response_length=R)
    cfg.multi_turn.interaction_config_path = write_yaml(
        config_dir / "interaction.yaml",
        {
            "interaction": [
                {
                    "name": "user",
                    "class_name": "tests.interactions.user_interactions.CountingInteraction",
                    "config": {"turns": 3},
                }
            ]
        },
    )
    cfg.agent.default_agent_loop = "tool_agent"
    cfg.agent.agent_loop_config_path = write_yaml(
        config_dir / "loops.yaml",
        [
            {
                "name": "echo",
                "_target_": "tests.agent_loop.user_loops.EchoLoop",
                "turns": 3,
                "tokens": 3,
                "suffix": " ok",
            }
        ],
    )
    recorder = Recorder(rollout)
    rollout.generate_requests = recorder
    try:
        runner = AgentLoopRunner(rollout, tok, cfg)
        batch = prompt_batch(
            tok,
            [[{"role": "user", "content": q}] for q in QUESTIONS],
            P,
            agent_name=AGENTS,
            extra_info=[{"interaction_kwargs": {"name": "user"}}] * len(QUESTIONS),
        )
        out = runner.run(batch, SamplingParams(n=n, temperature=temperature, response_length=R))
    finally:
        del rollout.generate_requests
    return batch, out, recorder.calls


def check_token_exact(batch, out, calls, n):
    """Every mask-1 token and log-prob is the engine's; every request is prompt + response so far."""
    by_trajectory: dict[int, list] = {}
    for call in calls:
        for request, result in call:
            by_trajectory.setdefault(request.key[0], []).append((request, result))
    b = out.batch
    assert sorted(by_trajectory) == list(range(len(b["responses"])))
    for t, pairs in by_trajectory.items():
        row = t // n
        prompt = batch.batch["input_ids"][row][batch.batch["attention_mask"][row].bool()].tolist()
        response, mask, logp = b["responses"][t].tolist(), b["response_mask"][t], b["rollout_log_probs"][t]
        sampled = torch.zeros(R, dtype=torch.long)
        for request, result in pairs:
            offset = len(request.prompt_ids) - len(prompt)
            assert list(request.prompt_ids) == prompt + response[:offset], f"trajectory {t}: re-encoded input"
            end = offset + len(result.token_ids)
            assert response[offset:end] == result.token_ids, (
                f"trajectory {t}: trained ids are not the sampled ids"
            )
            assert torch.equal(logp[offset:end], torch.tensor(result.log_probs, dtype=torch.float32))
            sampled[offset:end] = 1
        assert torch.equal(mask, sampled), f"trajectory {t}: mask 1 exactly where the engine's tokens are"
    return by_trajectory


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_multi_turn_batch_is_token_exact_and_on_policy(world, backend):
    actor, rollouts, config_dir = world
    if backend not in rollouts:
        pytest.skip("vLLM is not installed")
    batch, out, calls = run_mixed(rollouts[backend], config_dir)
    turns = out.non_tensor_batch["__num_turns__"].tolist()
    by_trajectory = check_token_exact(batch, out, calls, n=2)
    # echo: 3 turns with text inserted between; single_turn_agent: one; the user simulator's rows
    # (tool_agent by name and by default) take several turns when the model stops early
    assert [len(by_trajectory[t]) for t in (2, 3, 4, 5)] == [3, 3, 1, 1] and turns[4:6] == [2, 2]
    assert max(turns[0:2] + turns[6:8]) >= 4, f"the user simulator answered no one: {turns}"
    # no tool or user turn outlasts the hold (scheduler.py): one engine call per turn, none empty
    assert len(calls) == max(len(v) for v in by_trajectory.values()) and all(calls)
    masked = (out.batch["attention_mask"][:, P:].bool() & ~out.batch["response_mask"].bool()).sum()
    assert masked > 0, "inserted tokens (mask 0) in the batch"
    # verl's num_preempted, as the loop folds it over its engine results (0 on hf, which never
    # preempts); the echo loop (trajectories 2, 3) does not count: -1, verl's "not available"
    preempted = {t: -1 for t in by_trajectory}
    for t, pairs in by_trajectory.items():
        count = None
        for _, result in pairs:
            count = count_preempted(count, result)
        preempted[t] = -1 if t in (2, 3) else count
    stats = out.non_tensor_batch["agent_loop_stats"]
    assert [s["num_preempted"] for s in stats] == [preempted[t] for t in range(len(stats))]
    metrics = compute_agent_loop_metrics(out)
    if backend == "hf":
        assert set(preempted.values()) == {0, -1} and metrics["timing_s/agent_loop/num_preempted/max"] == 0
    slowest = int(np.argmax([s["generate_seconds"] + s.get("tool_seconds", 0.0) for s in stats]))
    real = int(out.batch["attention_mask"][slowest, P:].sum())
    assert metrics["timing_s/agent_loop/slowest/response_length"] == real
    actor_logp = compute_log_prob(
        actor, out.batch, micro_size=8, max_token_len=None, temperature=1.0, phase="lp"
    )
    diff = compute_logprob_diff_metrics(
        out.batch["rollout_log_probs"], actor_logp, out.batch["response_mask"]
    )
    assert diff["rollout/actor_logprob_abs_diff_max"] < 1e-4, diff


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_turns_are_seeded_by_call(world, backend):
    _, rollouts, config_dir = world
    if backend not in rollouts:
        pytest.skip("vLLM is not installed")
    rollout = rollouts[backend]
    start = rollout.num_calls
    _, first, _ = run_mixed(rollout, config_dir)
    rollout.num_calls = start
    _, again, _ = run_mixed(rollout, config_dir)
    assert torch.equal(first.batch["responses"], again.batch["responses"])
    _, third, _ = run_mixed(rollout, config_dir)
    assert not torch.equal(first.batch["responses"], third.batch["responses"])
