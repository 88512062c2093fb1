"""scripts/data_preprocess/gsm8k.py on a small fixture in GSM8K's layout, read back by RLHFDataset."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from verl_lite.data.rlhf_dataset import PromptSpec, RLHFDataset
from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.reward.scorers import default_compute_score

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "data_preprocess", "gsm8k.py")
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
TRAIN = [
    {
        "question": "Tom has 3 bags of 4 apples. How many apples?",
        "answer": "He has 3 * 4 = <<3*4=12>>12 apples.\n#### 12",
    },
    {
        "question": "A farm sells 1,250 eggs a day. How many in 2 days?",
        "answer": "1,250 * 2 = <<1250*2=2500>>2,500\n#### 2,500",
    },
    {"question": "It is 5 degrees and drops 8. What is it now?", "answer": "5 - 8 = -3\n#### -3"},
]
TEST = [{"question": "What is 10 / 4?", "answer": "10 / 4 = 2.5\n#### 2.5"}]


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def gsm8k_folder(tmp_path_factory):
    """The openai/gsm8k hub snapshot's layout (parquet under main/) for train, the original jsonl for test."""
    root = tmp_path_factory.mktemp("gsm8k")
    (root / "main").mkdir()
    pd.DataFrame(TRAIN).to_parquet(root / "main" / "train-00000-of-00001.parquet")
    (root / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in TEST))
    return root


@pytest.fixture(scope="module")
def converted(gsm8k_folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    result = run("--local_dataset_path", str(gsm8k_folder), "--local_dir", str(out))
    assert result.returncode == 0, result.stderr
    return out


def test_rows_in_verls_layout(converted):
    train = pd.read_parquet(converted / "train.parquet")
    assert list(train.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    row = train.iloc[1]
    assert row["data_source"] == "openai/gsm8k" and row["ability"] == "math"
    assert list(row["prompt"]) == [{"role": "user", "content": TRAIN[1]["question"] + " " + INSTRUCTION}]
    assert dict(row["reward_model"]) == {"style": "rule", "ground_truth": "2500"}  # commas removed
    assert dict(row["extra_info"]) == {
        "split": "train",
        "index": 1,
        "answer": TRAIN[1]["answer"],
        "question": TRAIN[1]["question"],
    }
    assert [r["ground_truth"] for r in train["reward_model"]] == ["12", "2500", "-3"]
    test = pd.read_parquet(converted / "test.parquet")
    assert len(test) == 1 and test.iloc[0]["reward_model"]["ground_truth"] == "2.5"
    assert test.iloc[0]["extra_info"]["split"] == "test"


def test_loads_through_rlhf_dataset_and_scores(converted):
    spec = PromptSpec(max_prompt_length=256)
    data = RLHFDataset(str(converted / "train.parquet"), build_tokenizer(), spec)
    assert len(data) == 3
    batch = data.collate([0, 2])
    assert list(batch.non_tensor_batch["data_source"]) == ["openai/gsm8k"] * 2
    truths = [r["ground_truth"] for r in batch.non_tensor_batch["reward_model"]]
    assert truths == ["12", "-3"]
    assert batch.batch["input_ids"].shape == (2, 256)
    # the GSM8K scorer picked by data_source accepts the dataset's own worked answer
    assert default_compute_score("openai/gsm8k", TRAIN[2]["answer"], truths[1], {}) == 1.0


def test_explicit_files_and_bad_rows_are_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps(TRAIN[0]) + "\n" + json.dumps({"question": "q", "answer": "no final line"}) + "\n"
    )
    result = run("--train_files", str(bad), "--test_files", str(bad), "--local_dir", str(tmp_path / "o"))
    assert result.returncode == 2
    assert f"{bad} row 1: the answer has no '#### <number>' line" in result.stderr
    result = run("--local_dataset_path", str(tmp_path / "empty"), "--local_dir", str(tmp_path / "o"))
    assert result.returncode == 2 and "no train files" in result.stderr
    result = run("--local_dir", str(tmp_path / "o"))
    assert result.returncode == 2 and "give --local_dataset_path or --train_files" in result.stderr
