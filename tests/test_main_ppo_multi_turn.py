"""verl's two multi-turn GSM8K tool scripts, end to end through the CLI on two CPU workers with vLLM:
examples/sglang_multiturn/run_qwen2.5-3b_gsm8k_multiturn_vllm_fsdp.sh and
run_qwen2.5-3b_gsm8k_tool_agent_mlflow.sh, their calls and config files as shipped with only paths
and sizes swapped (tests/helpers/verl_multi_turn.py says which), two steps each.

The model is a tiny Qwen2 warm-started (in the session, ~25 s) on traces of verl's GSM8K tool: it
calls `calc_gsm8k_reward`, reads the reply and answers `#### n`. The data is in verl's tool-agent
layout (agent_name, extra_info.tools_kwargs) at the scripts' $HOME/data/gsm8k; the two CPU workers
run one tensor-parallel vLLM engine together (tensor_model_parallel_size=2, as the scripts say:
every turn's requests of both ranks meet in one engine call). One run per script, many checks:
tools were called and ran (num_turns above 2, no tool errors), tool turns are masked, the rollout
sampled the actor's policy (bf16, verl's rollout dtype) on those multi-turn batches, the metrics and validation's num_turns are
there, the GSM8K rule scores, and the SGLang script's rollout.name is the one line swapped.
"""

import math
import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.helpers import shared_ray
from tests.helpers.tp_lock import tp_engine_lock
from tests.helpers.verl_multi_turn import PAIRS, SCRIPTS, question, tiny_call, tiny_model_dir, write_verl_tree
from tests.test_main_ppo import read_metrics

pytest.importorskip("vllm", reason="the vLLM rollout needs vllm (make install)")
pytestmark = pytest.mark.slow


def tool_agent_rows(pairs, split: str) -> list[dict]:
    """verl's tool-agent layout (scripts/data_preprocess/gsm8k_tool_agent_loop.py), short prompts."""
    return [
        {
            "data_source": "openai/gsm8k",
            "agent_name": "tool_agent",
            "prompt": question(a, b),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(a + b)},
            "extra_info": {
                "split": split,
                "index": i,
                "need_tools_kwargs": True,
                "tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": str(a + b)}}},
            },
        }
        for i, (a, b) in enumerate(pairs)
    ]


@pytest.fixture(scope="module")
def verl_tree(tmp_path_factory):
    """A verl checkout's config folder, the scripts' $HOME with its GSM8K tool-agent data, the model."""
    root = tmp_path_factory.mktemp("verl_multi_turn")
    write_verl_tree(root / "verl")
    model = tiny_model_dir(str(root / "model"))
    data = root / "home" / "data" / "gsm8k"
    data.mkdir(parents=True)
    pd.DataFrame(tool_agent_rows(PAIRS[200:232], "train")).to_parquet(data / "train.parquet")
    pd.DataFrame(tool_agent_rows(PAIRS[232:], "test")).to_parquet(data / "test.parquet")
    return root, model


@pytest.fixture(scope="module", params=list(SCRIPTS))
def script_run(request, verl_tree):
    root, model = verl_tree
    out = root / request.param / "run"
    call = tiny_call(SCRIPTS[request.param], root / "verl", root / "home", model, out)
    cmd = [sys.executable, "-m", "verl_lite.main_ppo", *call]
    # joins the tests' shared cluster (tests/helpers/shared_ray.py), as a script run under `ray start`
    env = shared_ray.joined_env(dict(os.environ, RAY_DEDUP_LOGS="0"))
    with tp_engine_lock():  # the scripts' TP=2 engine; no other of the suite's meanwhile (helpers/tp_lock.py)
        proc = subprocess.run(cmd, cwd=root / "verl", capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return request.param, read_metrics(out.parent), proc


def test_verl_script_runs_two_steps_calling_tools_masked_and_on_policy(script_run):
    name, rows, proc = script_run
    assert [r["step"] for r in rows] == [0, 1, 2], name
    for row in rows[1:]:
        bad = {k: v for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)}
        assert not bad, bad
        assert row["num_turns/mean"] > 2 and row["num_turns/max"] >= 4, row  # a tool turn and an answer
        # sampled at temperature 1, the tiny model writes a malformed call now and then: answered with an
        # error message and counted; no tool raised or timed out
        assert row["tool_call_counts/mean"] > 0.5, row
        assert row["agent_loop/num_tool_errors"] == row["agent_loop/num_malformed_tool_calls"] < 16, row
        assert row["agent_loop/num_tool_timeouts"] == 0, row
        assert 0 < row["agent_loop/masked_response_token_ratio"] < 1, row  # tool replies are masked
        assert row["agent_loop/tool_latency_s/max"] >= row["agent_loop/tool_latency_s/mean"] > 0
        assert row["agent_loop/engine_calls"] >= 2, row  # one engine call per turn
        # vLLM sampled the actor's current policy on these multi-turn batches: the scripts keep verl's
        # bf16 rollout (rounding: ~3e-3 mean); a trained token other than the sampled one costs nats
        assert row["rollout/actor_logprob_abs_diff_mean"] < 1e-2, row
        # a step's gradient is nonzero only where some group's answers differ in score; the tiny model
        # rarely copies the tool's sum into its answer, and on some CPUs (this fixture's training
        # follows their float rounding) no answer in either step scores: then GRPO's gradient is 0
        assert 0 <= row["critic/score/mean"] <= 1 and math.isfinite(row["actor/grad_norm"])
        assert "actor/kl_loss" in row  # both scripts: use_kl_loss=True
        assert row["response_length/mean"] > row["num_turns/mean"]
    assert rows[0]["val-aux/num_turns/mean"] > 2 and "val-core/openai/gsm8k/reward/mean@1" in rows[2]
    assert "Traceback" not in proc.stderr
