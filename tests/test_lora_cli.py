"""LoRA through the CLI with verl's keys: both rollouts, no reference copy, adapter-only syncs,
adapter checkpoints that resume exactly and export to PEFT and merged HF folders.

Three 2-step runs of the tiny demo with rank-8 adapters on every linear layer and a KL loss (so the
reference is used): HF rollout saving every step; the same resumed from its step-1 checkpoint; the
vLLM rollout.
"""

from __future__ import annotations

import os

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from tests.helpers.merged import assert_bf16_of
from tests.test_main_ppo import NONDETERMINISTIC, SMALL, read_metrics, run_cli
from verl_lite.config.schema import TINY_MODEL
from verl_lite.data import assets
from verl_lite.engine.checkpoint import LORA_DIR, MODEL_DIR
from verl_lite.engine.dcp_safe import read_dcp_metadata
from verl_lite.engine.lora import apply_lora
from verl_lite.engine.lora_spec import LoraSpec
from verl_lite.model_merger import merge

pytestmark = pytest.mark.slow

ARR = "actor_rollout_ref"
LORA = [
    *SMALL,
    f"{ARR}.model.lora_rank=8",
    f"{ARR}.model.lora_alpha=16",
    f"{ARR}.model.target_modules=all-linear",
    f"{ARR}.actor.use_kl_loss=True",
    f"{ARR}.actor.optim.lr=1e-3",
]
SAVE = ["trainer.save_freq=1", f"{ARR}.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"]
VLLM = [o for o in LORA if not o.startswith(f"{ARR}.rollout.name=")] + [
    f"{ARR}.rollout.name=vllm",
    f"{ARR}.rollout.cpu_kv_cache_gb=0.25",
]


def _ok(proc):
    assert proc.returncode == 0, proc.stderr[-4000:]


def adapter_bytes() -> int:
    """fp32 bytes of the demo model's rank-8 all-linear adapter, counted on a PEFT model."""
    from tests.helpers.configs import tiny_model

    model = AutoModelForCausalLM.from_pretrained(assets.resolve(TINY_MODEL))
    spec = LoraSpec.of(
        tiny_model(model.name_or_path, lora_rank=8, lora_alpha=16, target_modules="all-linear")
    )
    return sum(p.numel() * 4 for p in apply_lora(model, spec).parameters() if p.requires_grad)


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lora_hf")
    _ok(run_cli(tmp, *LORA, *SAVE, join=True))
    return tmp


def stable(rows):
    return [{k: v for k, v in r.items() if not k.startswith(NONDETERMINISTIC)} for r in rows]


def test_lora_trains_with_the_actor_as_its_own_reference(hf_run):
    rows = read_metrics(hf_run)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows[1:]:
        assert row["perf/ref_engines"] == 0, "LoRA: no reference engine, no second copy"
        assert row["timing_s/actor/compute_ref_log_prob"] > 0, "the ref's log-probs come from the actor"
        assert not [k for k in row if k.startswith(("timing_s/ref/", "perf/offload/ref/"))]
        assert row["actor/kl_loss"] >= 0 and row["actor/grad_norm"] > 0
    assert rows[2]["actor/kl_loss"] > 0, "after an update the adapters move the actor off the reference"


def test_checkpoints_hold_the_adapter_and_export_it(hf_run, tmp_path):
    actor = hf_run / "run" / "global_step_2" / "actor"
    keys = list(read_dcp_metadata(str(actor / MODEL_DIR)).state_dict_metadata)
    assert keys and all(".lora_A." in k or ".lora_B." in k for k in keys)
    ids = torch.randint(3, 100, (2, 10), generator=torch.Generator().manual_seed(0))

    def logits(model):
        with torch.no_grad():
            return model(input_ids=ids).logits

    base = AutoModelForCausalLM.from_pretrained(assets.resolve(TINY_MODEL))
    want = logits(PeftModel.from_pretrained(base, str(actor / LORA_DIR)))
    merged = merge(str(actor), str(tmp_path / "merged"))
    assert os.path.isfile(os.path.join(merged, LORA_DIR, "adapter_config.json"))
    diff = (
        (logits(AutoModelForCausalLM.from_pretrained(str(actor / "huggingface"))) - want).abs().max().item()
    )
    assert diff < 1e-5, f"the HF export's merged logits differ from the adapter model's by {diff}"
    assert_bf16_of(merged, str(actor / "huggingface"))  # the merger: the same merged weights, in verl's bf16
    base = AutoModelForCausalLM.from_pretrained(assets.resolve(TINY_MODEL))
    assert (logits(base) - want).abs().max() > 1e-4, "two updates must have moved the adapter"


def test_resume_from_a_lora_checkpoint_is_exact(hf_run, tmp_path):
    path = hf_run / "run" / "global_step_1"
    # no validation first: the resumed rollout's first sync then comes with step 2, as in the reference
    resume = [
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={path}",
        "trainer.val_before_train=False",
    ]
    _ok(run_cli(tmp_path, *LORA, *resume, join=True))
    resumed = [r for r in read_metrics(tmp_path) if r["step"] == 2]
    reference = [r for r in read_metrics(hf_run) if r["step"] == 2]
    assert resumed and stable(resumed) == stable(reference)


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory):
    pytest.importorskip("vllm", reason="the vLLM rollout needs vllm (make install)")
    tmp = tmp_path_factory.mktemp("lora_vllm")
    _ok(run_cli(tmp, *VLLM, join=True))
    return tmp


def test_vllm_serves_the_synced_adapter_and_only_the_adapter_moves(vllm_run):
    rows = read_metrics(vllm_run)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows[1:]:
        assert row["rollout/actor_logprob_abs_diff_max"] < 1e-4, row  # fp32 on CPU, as without LoRA
        assert row["perf/ref_engines"] == 0
    # step 0's validation brought the base (load_format=dummy) and the adapter; step 2 follows an update
    gb = rows[2]["perf/update_weights_gb"] * 1024**3
    assert round(gb) == adapter_bytes(), "after the first sync only the adapter moves"
    assert rows[2]["perf/weight_sync_unverified_params"] == 0, "the adapter checked where vLLM holds it"


@pytest.fixture(scope="module")
def vllm_merged_run(tmp_path_factory):
    pytest.importorskip("vllm", reason="the vLLM rollout needs vllm (make install)")
    tmp = tmp_path_factory.mktemp("lora_vllm_merged")
    _ok(run_cli(tmp, *VLLM, f"{ARR}.model.lora.merge=True", join=True))
    return tmp


def test_vllm_serves_the_merged_weights_with_lora_merge(vllm_merged_run):
    """verl 0.9's lora.merge: vLLM runs without LoRA and each sync sends the whole model with the
    adapter merged in; vLLM's log-probs are the adapter actor's, and every merged weight is checked."""
    rows = read_metrics(vllm_merged_run)
    assert [r["step"] for r in rows] == [0, 1, 2]
    model = AutoModelForCausalLM.from_pretrained(assets.resolve(TINY_MODEL))
    # fp32; the tied LM head is sent as its own tensor too, as vLLM loads it (with_tied_lm_head)
    whole = sum(p.numel() * 4 for _, p in model.named_parameters(remove_duplicate=False))
    for row in rows[1:]:
        assert row["rollout/actor_logprob_abs_diff_max"] < 1e-4, row  # the adapter model's policy
        assert row["perf/ref_engines"] == 0
    # step 1 needs no sync (a fresh adapter merges to the base vLLM loaded); step 2 follows an update
    assert round(rows[2]["perf/update_weights_gb"] * 1024**3) == whole, "the whole merged model each sync"
    assert rows[2]["perf/weight_sync_unverified_params"] == 0, "every merged weight checked in vLLM"
    assert rows[2]["timing_s/weight_sync_verify"] > 0
    assert rows[2]["actor/kl_loss"] > 0, "the adapter moved the actor, and the rollout followed it"
