"""scripts/data_preprocess/gsm8k_tool_agent_loop.py on a small GSM8K fixture: verl's tool-agent rows,
read back by RLHFDataset with the tools in the chat template, handing the agent loop its fields."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from tests.helpers.agent import VERL_GSM8K_TOOL_CONFIG, write_yaml
from verl_lite.data.rlhf_dataset import PromptSpec, RLHFDataset
from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.data.tool_chat_template import TOOL_CHAT_TEMPLATE
from verl_lite.tools.registry import tool_schemas

SCRIPT = Path(__file__).parents[2] / "scripts" / "data_preprocess" / "gsm8k_tool_agent_loop.py"
TRAIN = [
    {"question": "Tom has 3 bags of 4 apples. How many apples?", "answer": "3 * 4 = 12\n#### 12"},
    {"question": "It is 5 degrees and drops 8. What is it now?", "answer": "5 - 8 = -3\n#### -3"},
]
TEST = [{"question": "What is 1,000 + 5?", "answer": "1,000 + 5 = 1,005\n#### 1,005"}]


def test_rows_in_verls_tool_agent_layout_and_back_through_the_dataset(tmp_path):
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in TRAIN))
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in TEST))
    out = tmp_path / "out"
    cmd = [sys.executable, str(SCRIPT), "--local_dataset_path", str(tmp_path), "--local_save_dir", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    train = pd.read_parquet(out / "train.parquet")
    assert list(train.columns) == [
        "data_source",
        "agent_name",
        "prompt",
        "ability",
        "reward_model",
        "extra_info",
    ]
    row = train.iloc[1]
    assert row["agent_name"] == "tool_agent" and row["data_source"] == "openai/gsm8k"
    system, user = list(row["prompt"])
    assert system["role"] == "system" and "`calc_gsm8k_reward` tool" in system["content"]
    assert (
        user["content"]
        == TRAIN[1]["question"] + " Let's think step by step and output the final answer after `####`."
    )
    info = row["extra_info"]
    assert info["need_tools_kwargs"] is True and info["index"] == 1 and info["split"] == "train"
    assert info["tools_kwargs"]["calc_gsm8k_reward"]["create_kwargs"]["ground_truth"] == "-3"
    assert dict(info["interaction_kwargs"]) == {"query": user["content"], "ground_truth": "-3"}
    assert pd.read_parquet(out / "test.parquet").iloc[0]["reward_model"]["ground_truth"] == "1005"

    tok = build_tokenizer()
    tok.chat_template = TOOL_CHAT_TEMPLATE
    tools = tool_schemas(write_yaml(tmp_path / "tools.yaml", VERL_GSM8K_TOOL_CONFIG))
    data = RLHFDataset(
        str(out / "train.parquet"), tok, PromptSpec(max_prompt_length=2048, tools=tuple(tools))
    )
    prompt = tok.decode(data.prompts[0])
    assert (
        prompt.startswith("<|im_start|>system\nYou are a math expert.")
        and '"name": "calc_gsm8k_reward"' in prompt
    )
    batch = data.collate([0, 1]).non_tensor_batch
    assert list(batch["agent_name"]) == ["tool_agent"] * 2
    assert batch["tools_kwargs"][1] == {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "-3"}}}
    assert batch["interaction_kwargs"][0]["ground_truth"] == "12"


def test_a_missing_answer_line_names_the_row(tmp_path):
    (tmp_path / "train.jsonl").write_text(json.dumps({"question": "q", "answer": "no final line"}) + "\n")
    (tmp_path / "test.jsonl").write_text(json.dumps(TEST[0]) + "\n")
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--local_dataset_path",
        str(tmp_path),
        "--local_save_dir",
        str(tmp_path / "o"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "train.jsonl row 0: the answer has no '#### <number>' line" in proc.stderr
