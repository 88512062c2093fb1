"""What only a GPU shows for rollout correction: the mismatch it exists for. The HF rollout samples in
bf16 on the device (its decode never copies to the host per token) while the actor recomputes the
log-probs in fp32 (FSDP2, world size 1); algorithm.rollout_correction's metrics say how far apart
they are, and its weights and rejection stay finite. Run by scripts/gpu_check.sh."""

from __future__ import annotations

import math
import os

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from tests.helpers.configs import fp32_fsdp, tiny_model, tiny_rollout
from tests.helpers.dist import free_port
from verl_lite.algos.rollout_corr import compute_rollout_correction
from verl_lite.config.schema_trainer import RolloutCorrectionConfig as correction
from verl_lite.data.tiny_tokenizer import build_tokenizer
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.rollout.base import SamplingParams, assemble, place_log_probs
from verl_lite.rollout.hf_rollout import HFRollout
from verl_lite.utils import device as dev
from verl_lite.workers.actor import compute_log_prob

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (scripts/gpu_check.sh)"),
]


@pytest.fixture(scope="module", autouse=True)
def group():
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dev.set_local_device()
    dist.init_process_group(dev.dist_backend(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_bf16_rollout_against_the_fp32_actor_is_measured_and_corrected(tiny_model_dir):
    tokenizer = build_tokenizer()
    rollout = HFRollout(tiny_model(tiny_model_dir), tiny_rollout(dtype="bf16", seed=1), tokenizer, rank=0)
    g = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(3, 100, (16, 12), generator=g)
    prompt_mask = torch.ones_like(prompt_ids)
    prompt_pos = torch.arange(12).expand(16, -1).clone()
    params = SamplingParams(n=2, temperature=1.0, response_length=32, ignore_eos=True)
    raw, raw_logp = rollout.generate_tokens(prompt_ids, prompt_mask, params)
    batch = assemble(prompt_ids, prompt_mask, prompt_pos, raw, 2, 32, tokenizer.eos_token_id, 0, False)
    rollout_logp = place_log_probs(raw_logp, batch["response_mask"])
    actor = FSDPEngine(tiny_model(tiny_model_dir), fp32_fsdp(), init_device_mesh("cuda", (1,)), role="ref")
    logp = compute_log_prob(actor, batch, micro_size=16, max_token_len=None, temperature=1.0, phase="lp")
    mask = batch["response_mask"]
    rc = correction(rollout_is="token", rollout_rs="token_k1", rollout_rs_threshold="0.5_2.0")
    weights, kept, metrics = compute_rollout_correction(logp, rollout_logp, mask, rc)
    print({k: round(v, 6) for k, v in metrics.items() if k.endswith(("kl", "is_mean", "masked_fraction"))})
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert 0 < abs(metrics["rollout_corr/kl"]) < 0.1, "bf16 and fp32 differ, by rounding only"
    assert 0.5 < metrics["rollout_corr/rollout_is_mean"] < 2.0
    assert weights.shape == mask.shape and kept.sum() > 0.9 * mask.sum()
