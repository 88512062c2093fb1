"""The embedded default: model folder, tokenizer, and parquet files in verl's layout; a model build that
gives the same bits on every machine."""

import json
import os
from pathlib import Path

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl_lite.data import arith, assets, pinned_build
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


def _cached_model_record() -> dict:
    return json.loads((Path(assets.resolve("verl_lite://tiny-qwen2-arith")) / "DONE").read_text())


def test_model_build_gives_the_same_bits_whatever_the_calling_process(tmp_path):
    """Two short builds (40 SFT steps), one from this process's environment and one from a process started
    with 2 threads, AVX-512 kernels asked for and MKL limited to AVX2 (as on a CPU without AVX-512), give
    the same bits: the build pins its own threads and kernels. Unpinned, each kernel setting changes the
    40-step weights (measured on an AVX-512 Xeon: torch's AVX-512 kernels; AVX2 kernels with MKL free;
    MKL capped at AVX2 without MKL_CBWR: three digests, none the pinned one)."""
    hostile = dict(
        os.environ,
        OMP_NUM_THREADS="2",
        MKL_NUM_THREADS="2",
        ATEN_CPU_CAPABILITY="avx512",
        MKL_ENABLE_INSTRUCTIONS="AVX2",
    )
    plain = pinned_build.run_pinned("verl_lite.data.warm_start", str(tmp_path / "plain"), "40")
    again = pinned_build.run_pinned(
        "verl_lite.data.warm_start", str(tmp_path / "hostile"), "40", base_env=hostile
    )
    assert again["num_threads"] == plain["num_threads"] == 1
    assert again["cpu_capability"] == plain["cpu_capability"]
    assert (
        again["weights_sha256"]
        == plain["weights_sha256"]
        == pinned_build.weights_digest(tmp_path / "hostile")
    )


def test_model_build_matches_the_recorded_reference():
    """The cached asset's weights are those its build record names, and that digest is the one recorded in
    pinned_build.REFERENCE: a CI machine whose build drifts fails here."""
    cached = _cached_model_record()
    assert cached["weights_sha256"] == pinned_build.weights_digest(
        assets.resolve("verl_lite://tiny-qwen2-arith")
    )
    if pinned_build.matches_reference(cached) is None:
        pytest.skip(
            f"the reference is recorded for torch {pinned_build.REFERENCE['torch']}, transformers "
            f"{pinned_build.REFERENCE['transformers']} with {pinned_build.PINNED_CAPABILITY} kernels on a "
            f"{pinned_build.REFERENCE['cpu_vendor']} CPU; this build: torch {cached['torch']}, transformers "
            f"{cached['transformers']}, {cached['cpu_capability']}, {cached['cpu_vendor']}"
        )
    assert cached["weights_sha256"] == pinned_build.REFERENCE["weights_sha256"]


def test_cache_folder_names_the_recipe_version(monkeypatch, tmp_path):
    """Assets of an older recipe (another version folder) are never reused."""
    monkeypatch.setenv("VERL_LITE_CACHE", str(tmp_path))
    assert assets.cache_root() == tmp_path / assets.RECIPE_VERSION


def test_a_build_killed_before_its_rename_is_cleared_by_the_next_and_only_its_own(tmp_path):
    """build_once builds into `.NAME.build-*` and renames it into place: a build killed in between (a
    first run stopped with Ctrl-C while it built its model) leaves that folder; the next build of NAME
    removes it, and leaves another asset's (whose name NAME begins) alone."""
    (tmp_path / ".arith.build-killed").mkdir()
    (tmp_path / ".arith.build-killed" / "model.safetensors").write_bytes(b"half")
    (tmp_path / ".arith-tool.build-running").mkdir()
    built = assets.build_once(tmp_path / "arith", lambda folder: (folder / "x").write_text("1") and {}, "t")
    assert (built / "x").read_text() == "1" and (built / "DONE").exists()
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock"))
    assert left == [".arith-tool.build-running", "arith"], left
