"""The CLI end to end with multi-turn tool rollouts: GRPO through verl's tool agent loop on vLLM.

The model is a tiny Qwen2 warm-started (in the session, ~20 s) on traces of verl's GSM8K tool: it
calls `calc_gsm8k_reward`, reads the reply and answers `#### n`. The data is in verl's tool-agent
layout (agent_name, extra_info.tools_kwargs), the tool config is verl's file as shipped, two CPU
workers run one tensor-parallel vLLM engine together (tensor_model_parallel_size=2: every turn's
requests of both ranks meet in one engine call). One run, many checks: tools were called and ran
(num_turns above 2), tool turns are masked, the rollout sampled the actor's policy on those
multi-turn batches, the metrics and validation's num_turns are there, the GSM8K rule scores.
"""

import math
import random

import pandas as pd
import pytest

from tests.helpers.agent import VERL_GSM8K_TOOL_CONFIG, write_yaml
from tests.helpers.tool_model import gsm8k_tool_trace, make_tool_model_dir
from tests.test_main_ppo import read_metrics, run_cli

pytest.importorskip("vllm", reason="the vLLM rollout needs vllm (make install)")
pytestmark = pytest.mark.slow
ARR = "actor_rollout_ref"


def question(a: int, b: int) -> list[dict]:
    return [{"role": "user", "content": f"{a}+{b}="}]


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
def multi_turn_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("multi_turn")
    rng = random.Random(0)
    pairs = [(rng.randrange(50), rng.randrange(50)) for _ in range(240)]
    model = make_tool_model_dir(
        str(tmp / "model"), [gsm8k_tool_trace(question(a, b), str(a + b)) for a, b in pairs[:200]], steps=300
    )
    pd.DataFrame(tool_agent_rows(pairs[200:232], "train")).to_parquet(tmp / "train.parquet")
    pd.DataFrame(tool_agent_rows(pairs[232:], "test")).to_parquet(tmp / "test.parquet")
    proc = run_cli(
        tmp,
        f"{ARR}.model.path={model}",
        f"data.train_files={tmp / 'train.parquet'}",
        f"data.val_files={tmp / 'test.parquet'}",
        "data.max_prompt_length=24",
        "data.max_response_length=200",
        "data.train_batch_size=8",
        "data.tool_config_path=null",  # the model was warm-started on prompts that list no tools
        f"{ARR}.rollout.multi_turn.enable=True",
        f"{ARR}.rollout.multi_turn.tool_config_path={write_yaml(tmp / 'tools.yaml', VERL_GSM8K_TOOL_CONFIG)}",
        f"{ARR}.rollout.multi_turn.max_assistant_turns=3",
        f"{ARR}.rollout.name=vllm",
        f"{ARR}.rollout.tensor_model_parallel_size=2",
        f"{ARR}.rollout.cpu_kv_cache_gb=0.25",
        f"{ARR}.rollout.n=4",
        f"{ARR}.actor.ppo_mini_batch_size=4",
        f"{ARR}.actor.ppo_micro_batch_size_per_gpu=8",
        "trainer.total_training_steps=2",
        "trainer.test_freq=2",
        "trainer.n_gpus_per_node=2",
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return tmp, proc


def test_tools_are_called_their_turns_masked_and_the_rollout_on_policy(multi_turn_run):
    rows = read_metrics(multi_turn_run[0])
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows[1:]:
        bad = {k: v for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)}
        assert not bad, bad
        assert row["num_turns/mean"] > 2 and row["num_turns/max"] >= 4, row  # a tool turn and an answer
        assert row["tool_call_counts/mean"] > 0.5 and row["agent_loop/num_tool_errors"] == 0, row
        assert 0 < row["agent_loop/masked_response_token_ratio"] < 1, row  # tool replies are masked
        assert row["agent_loop/tool_latency_s/max"] >= row["agent_loop/tool_latency_s/mean"] > 0
        assert row["agent_loop/engine_calls"] >= 2, row  # one engine call per turn
        # vLLM sampled the actor's current policy on these multi-turn batches (fp32 on CPU: ~1e-6)
        assert row["rollout/actor_logprob_abs_diff_max"] < 1e-4, row
        assert 0 <= row["critic/score/mean"] <= 1 and row["actor/grad_norm"] > 0
        assert row["response_length/mean"] > row["num_turns/mean"]
    assert rows[0]["val-aux/num_turns/mean"] > 2 and "val-core/openai/gsm8k/reward/mean@1" in rows[2]
