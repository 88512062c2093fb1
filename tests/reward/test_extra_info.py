"""reward/extra_info.py: what a reward function written for verl 0.9.1 reads in extra_info reaches it.

The tool agent loop runs for real (scripted model turns, verl's GSM8K tool and interaction), its
batch goes to the naive reward manager the way the driver hands it on, and a reward file that reads
verl's keys (num_turns, tool_rewards, turn_scores, raw_prompt, rollout_reward_scores) scores from them.
"""

import numpy as np
import pytest

from tests.agent_loop.scripted import ScriptedRollout, prompt_batch, tool_tokenizer
from tests.agent_loop.test_tool_agent import ANSWER, CALL_7, CALL_8, QUESTION, P, R, rollout_cfg
from tests.helpers.agent import VERL_GSM8K_INTERACTION_CONFIG, write_yaml
from tests.helpers.models import response_batch
from verl_lite.agent_loop.base import AgentLoopOutput
from verl_lite.agent_loop.runner import AgentLoopRunner, reward_fields
from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.protocol import DataProto
from verl_lite.reward.naive import NaiveRewardManager
from verl_lite.reward.scorers import load_custom_scorer
from verl_lite.rollout.base import SamplingParams

# a reward file as a verl user writes it: the answer tool's calc_reward, the step rewards of the
# tool calls, the interaction's turn scores, and a cost per turn
VERL_STYLE_REWARD = """\
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    calc = extra_info["rollout_reward_scores"].get("calc_gsm8k_reward", 0.0)
    score = calc + sum(extra_info["tool_rewards"]) + sum(extra_info["turn_scores"])
    return {
        "score": score - 0.1 * extra_info["num_turns"],
        "num_turns": extra_info["num_turns"],
        "tool_rewards": list(extra_info["tool_rewards"]),
        "turn_scores": list(extra_info["turn_scores"]),
        "split": extra_info["split"],
        "asked": extra_info["raw_prompt"][-1]["content"],
    }
"""


def test_a_verl_reward_file_scores_from_num_turns_tool_rewards_and_turn_scores(tmp_path):
    tok = tool_tokenizer()
    cfg = rollout_cfg(tmp_path)
    cfg.multi_turn.interaction_config_path = write_yaml(
        tmp_path / "inter.yaml", VERL_GSM8K_INTERACTION_CONFIG
    )
    # row 0: answers 8 through the tool (step reward -0.05: no improvement), then 7 (0.0), then
    # "#### 7", which the interaction takes (1.0, done); row 1: "#### 8" (0.0), told so, "#### 7" (1.0)
    engine = ScriptedRollout(tok, [[CALL_8, CALL_7, ANSWER], ["#### 8<|im_end|>", ANSWER]])
    row_info = {"split": "train", "interaction_kwargs": {"name": "gsm8k", "ground_truth": "7"}}
    batch = prompt_batch(
        tok,
        [QUESTION, QUESTION],
        P,
        agent_name=["tool_agent"] * 2,
        tools_kwargs=[{"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "7"}}}] * 2,
        interaction_kwargs=[row_info["interaction_kwargs"]] * 2,
        extra_info=[row_info, row_info],
        data_source=["openai/gsm8k"] * 2,
        reward_model=[{"ground_truth": "7"}] * 2,
    )
    out = AgentLoopRunner(engine, tok, cfg).run(
        batch, SamplingParams(n=1, temperature=1.0, response_length=R)
    )
    scored = DataProto.from_dict(non_tensors=dict(batch.non_tensor_batch)).union(out)  # as the driver does

    path = tmp_path / "verl_reward.py"
    path.write_text(VERL_STYLE_REWARD)
    manager = NaiveRewardManager(tok, load_custom_scorer(str(path), "compute_score"))
    rewards, extra = manager(scored)

    # row 0: 3 assistant + 2 tool turns + 1 interaction turn + 1; row 1: 2 assistant + 2 interaction + 1
    assert extra["num_turns"] == [7, 5]
    assert extra["tool_rewards"] == [[-0.05, 0.0], []]
    assert extra["turn_scores"] == [[1.0], [0.0, 1.0]]
    assert extra["split"] == ["train", "train"]
    assert extra["asked"] == ["3+4=", "3+4="]  # the row's chat messages, as verl's agent loop adds them
    # 1.0 (calc_reward) - 0.05 + 1.0 - 0.7 and 0 + 0 + 1.0 - 0.5
    assert rewards.sum(-1).tolist() == pytest.approx([1.25, 0.5])
    nt = scored.non_tensor_batch
    assert nt["reward_scores"].tolist() == [
        {"calc_gsm8k_reward": 1.0, "user_turn_rewards": [1.0]},
        {"user_turn_rewards": [0.0, 1.0]},  # no tool used, no calc_reward
    ]
    assert row_info == {"split": "train", "interaction_kwargs": {"name": "gsm8k", "ground_truth": "7"}}


def seen_by(batch: DataProto) -> list[dict]:
    """The extra_info the reward function got for each row."""
    seen = []

    def record(data_source, solution_str, ground_truth, extra_info=None):
        seen.append(extra_info)
        return 0.0

    NaiveRewardManager(build_tokenizer(), record)(batch)
    return seen


def test_a_loops_own_fields_reach_extra_info_and_num_turns_is_verls():
    """A user loop's extra_fields reach extra_info (verl's tool_extra_fields); num_turns and
    rollout_reward_scores are set last, as verl sets them; a loop that sets none gets []."""
    tok = build_tokenizer()
    batch = response_batch(tok, ["1", "2"], 4)
    outputs = [
        AgentLoopOutput([1], [2], [1], num_turns=4, extra_fields={"judge": "ok", "num_turns": -1}),
        AgentLoopOutput([1], [2], [1], num_turns=2, extra_fields={"reward_scores": {"my_tool": 0.5}}),
    ]
    batch.non_tensor_batch |= {"__num_turns__": np.array([4, 2], dtype=np.int32), **reward_fields(outputs)}
    batch.non_tensor_batch["extra_info"] = np.array([{"index": 0}, {"index": 1}], dtype=object)
    first, second = seen_by(batch)
    assert first == {
        "index": 0,
        "judge": "ok",
        "num_turns": 4,
        "turn_scores": [],
        "tool_rewards": [],
        "rollout_reward_scores": {},
    }
    assert second["rollout_reward_scores"] == {"my_tool": 0.5} and "reward_scores" not in second
    assert type(first["num_turns"]) is int


def test_a_single_turn_batch_reads_as_verls_single_turn_agent():
    """No agent-loop columns (the single-turn path): verl 0.9's single_turn_agent values."""
    tok = build_tokenizer()
    batch = response_batch(tok, ["1", "2"], 4)
    row = {"index": 3}
    messages = [{"role": "user", "content": "1+0="}]
    batch.non_tensor_batch["extra_info"] = np.array([row, row], dtype=object)
    batch.non_tensor_batch["raw_prompt"] = np.empty(2, dtype=object)  # a list per row, as the dataset's
    batch.non_tensor_batch["raw_prompt"][:] = [messages, messages]
    first, second = seen_by(batch)
    assert first == {
        "index": 3,
        "num_turns": 2,
        "turn_scores": [],
        "tool_rewards": [],
        "raw_prompt": messages,
        "rollout_reward_scores": {},
    }
    assert row == {"index": 3}  # the batch's dict is not written to
    first["tool_rewards"].append(1.0)  # nor are the rows' lists shared
    assert second["tool_rewards"] == []
