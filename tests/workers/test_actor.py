"""The actor's per-token statistics through a real FSDP2 engine (1 gloo rank, fp32, the tiny model):
sum_v pi_v^2 (optimal_token_baseline's input) against a plain transformers forward, and the log-probs
it comes with equal compute_log_prob's, padded and packed."""

from __future__ import annotations

import torch
from torch.distributed.device_mesh import init_device_mesh
from transformers import AutoModelForCausalLM

from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.config.schema import FSDPConfig, MixedPrecisionConfig, ModelConfig
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.workers.actor import compute_log_prob, compute_log_prob_and_sum_pi_squared

RESP, TEMPERATURE = 5, 0.7


def _stats(rank, world, model_dir, batch):
    out = {}
    for packed in (False, True):
        fsdp = FSDPConfig(model_dtype="fp32", mixed_precision=MixedPrecisionConfig("fp32", "fp32", "fp32"))
        model = ModelConfig(path=model_dir, use_remove_padding=packed)
        engine = FSDPEngine(model, fsdp, init_device_mesh("cpu", (world,)), role="ref")
        kw = dict(micro_size=3, max_token_len=None, temperature=TEMPERATURE, phase="log_prob")
        out[packed] = (
            *compute_log_prob_and_sum_pi_squared(engine, batch, **kw),
            compute_log_prob(engine, batch, **kw),
        )
    return out


def test_sum_pi_squared_matches_a_plain_forward(tiny_model_dir):
    batch = make_ppo_batch(vocab=110, bs=7, prompt_len=6, response_len=RESP, seed=3)
    (runs,) = run_ranks(_stats, 1, tiny_model_dir, batch)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits[:, -RESP - 1 : -1]
    probs = torch.softmax(logits / TEMPERATURE, dim=-1)  # (bs, R, vocab)
    expected = probs.square().sum(-1)  # (bs, R)
    mask = batch["response_mask"].bool()
    assert ((expected[mask] > 0) & (expected[mask] < 1)).all()
    for packed, (logp, sum_pi_squared, logp_alone) in runs.items():
        torch.testing.assert_close(
            sum_pi_squared[mask], expected[mask], atol=1e-5, rtol=1e-4, msg=f"packed={packed}"
        )
        assert torch.equal(logp[mask], logp_alone[mask]), "one forward gives both, with the same log-probs"
