"""What generate_sequences receives: a single-turn batch exactly as before; a batch with an agent
loop the rows' fields, their messages and the agent_loop flag."""

import pandas as pd

from verl_lite.data.rlhf_dataset import PromptSpec, RLHFDataset
from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.trainer.rollout_inputs import ROLLOUT_INPUTS, rollout_inputs


def dataset(tmp_path, agent_names):
    rows = [
        {
            "data_source": "verl_lite/arith",
            "prompt": [{"role": "user", "content": f"{i}+1="}],
            "reward_model": {"ground_truth": str(i + 1)},
            "extra_info": {"index": 100 + i, "tools_kwargs": {"calc": {"create_kwargs": {"x": str(i)}}}},
            "ability": f"math{i}",
            **({"agent_name": name} if name is not False else {}),
        }
        for i, name in enumerate(agent_names)
    ]
    pd.DataFrame(rows).to_parquet(tmp_path / "d.parquet")
    return RLHFDataset(str(tmp_path / "d.parquet"), build_tokenizer(), PromptSpec(max_prompt_length=16))


def test_single_turn_rows_send_the_prompt_tensors_only(tmp_path):
    data = dataset(tmp_path, [False, False])
    batch = data.collate([0, 1])
    batch.meta_info["x"] = 1
    sent = rollout_inputs(batch, data, "single_turn_agent")
    assert sorted(sent.batch) == sorted(ROLLOUT_INPUTS) and sent.non_tensor_batch == {}
    assert sent.meta_info == {"x": 1}


def test_a_tool_agent_row_sends_the_rows_fields_and_messages(tmp_path):
    data = dataset(tmp_path, [None, "tool_agent"])
    batch = data.collate([1, 0])
    sent = rollout_inputs(batch, data, "single_turn_agent", meta_keys=[])
    assert sent.meta_info == {"agent_loop": True}
    nt = sent.non_tensor_batch
    assert list(nt["agent_name"]) == ["tool_agent", "single_turn_agent"]  # the default filled in
    assert list(nt["raw_prompt"]) == [
        [{"role": "user", "content": "1+1="}],
        [{"role": "user", "content": "0+1="}],
    ]
    assert nt["tools_kwargs"][0] == {"calc": {"create_kwargs": {"x": "1"}}} and "extra_info" in nt
    # no agent_name column, but tool_agent is the default loop: every row runs it
    plain = dataset(tmp_path, [False, False])
    assert (
        list(rollout_inputs(plain.collate([0, 1]), plain, "tool_agent").non_tensor_batch["agent_name"])
        == ["tool_agent"] * 2
    )


def test_a_loop_gets_verls_index_and_every_column_of_its_row(tmp_path):
    """verl's RLHFDataset.__getitem__ gives a loop's run(**kwargs) extra_info.index as `index` and every
    column of the row; the row's position in the dataset stays verl_lite's own field."""
    data = dataset(tmp_path, [None, "tool_agent"])
    batch = data.collate([1, 0])
    assert list(batch.non_tensor_batch["dataset_index"]) == [1, 0]
    nt = rollout_inputs(batch, data, "single_turn_agent").non_tensor_batch
    assert list(nt["index"]) == [101, 100]  # extra_info.index, not the position
    assert list(nt["ability"]) == ["math1", "math0"] and list(nt["data_source"]) == ["verl_lite/arith"] * 2
    assert [list(p) for p in nt["prompt"]] == [[{"role": "user", "content": f"{i}+1="}] for i in (1, 0)]
    assert list(nt["interaction_kwargs"]) == [{}, {}] and "dataset_index" not in nt
