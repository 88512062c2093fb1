"""The embedded default: model folder, tokenizer, and parquet files in verl's layout."""

import pandas as pd
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl_lite.data import arith, assets
from verl_lite.data.rlhf_dataset import PromptSpec, RLHFDataset
from verl_lite.reward.scorers import score_arith


def test_task_splits_are_disjoint_and_fixed():
    splits = arith.split_pairs()
    sets = {k: set(v) for k, v in splits.items()}
    assert (
        not (sets["sft"] & sets["train"])
        and not (sets["train"] & sets["test"])
        and not (sets["sft"] & sets["test"])
    )
    assert splits == arith.split_pairs()


def test_parquet_files_have_verls_columns():
    frame = pd.read_parquet(assets.resolve("verl_lite://arith/train.parquet"))
    assert {"data_source", "prompt", "ability", "reward_model", "extra_info"} <= set(frame.columns)
    assert list(frame.iloc[0]["prompt"][0].keys()) == ["role", "content"]
    assert len(frame) == arith.SPLIT_SIZES["train"]


def test_warm_started_model_solves_part_of_the_task():
    path = assets.resolve("verl_lite://tiny-qwen2-arith")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    assert model.config.hidden_size // model.config.num_attention_heads in (32, 64)  # vLLM CPU kernels
    ds = RLHFDataset(assets.resolve("verl_lite://arith/test.parquet"), tok, PromptSpec(max_prompt_length=16))
    batch = ds.collate(list(range(200))).batch
    with torch.no_grad():
        out = model.generate(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            max_new_tokens=6,
            do_sample=False,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
    texts = tok.batch_decode(out[:, 16:], skip_special_tokens=True)
    truths = [r["reward_model"]["ground_truth"] for r in ds.rows[:200]]
    accuracy = sum(score_arith("", t, g) for t, g in zip(texts, truths)) / 200
    assert 0.05 < accuracy < 0.6, f"warm start should solve part of the task, got {accuracy}"
