"""A frozen engine (the reference) keeps its weights in its compute dtype: bf16 under verl's bf16
mixed precision, half the bytes of fp32 master weights, and the very same log-probs.

Two gloo ranks, bf16 compute (mixed_precision.param_dtype=bf16, as verl runs on GPUs), the tiny
model: the reference engine (no optimizer) against the same model in an engine that trains (fp32
master weights, each gather cast to bf16: what the reference held before).
"""

from __future__ import annotations

import torch

from tests.helpers.configs import fp32_fsdp, tiny_model, tiny_optim
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.config.schema import MixedPrecisionConfig
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.engine.mesh import build_layout
from verl_lite.engine.model_shape import ModelShape
from verl_lite.planner.engine_memory import estimate
from verl_lite.planner.engine_setup import EngineSetup
from verl_lite.workers.actor import compute_log_prob

BF16 = MixedPrecisionConfig(param_dtype="bf16", reduce_dtype="fp32", buffer_dtype="fp32")


def _log_probs_and_shards(rank, world, model_dir):
    batch = make_ppo_batch(vocab=110, bs=8, seed=4)
    out = {}
    for role, optim in (("ref", None), ("actor", tiny_optim())):
        fsdp = fp32_fsdp(mixed_precision=BF16)  # model_dtype fp32, compute bf16
        engine = FSDPEngine(tiny_model(model_dir), fsdp, build_layout("cpu"), role=role, optim_cfg=optim)
        logp = compute_log_prob(engine, batch, micro_size=4, max_token_len=None, temperature=1.0, phase="lp")
        shards = [p.to_local() for p in engine.module.parameters()]
        buffers = {b.dtype for b in engine.module.buffers() if b.is_floating_point()}
        nbytes = sum(s.numel() * s.element_size() for s in shards)
        out[role] = logp, {s.dtype for s in shards}, nbytes, buffers
    return out


def test_the_reference_keeps_bf16_weights_and_gives_the_same_log_probs(tiny_model_dir):
    for out in run_ranks(_log_probs_and_shards, 2, tiny_model_dir):
        (ref_logp, ref_dtypes, ref_bytes, ref_buffers), (logp, dtypes, nbytes, _) = out["ref"], out["actor"]
        assert ref_dtypes == {torch.bfloat16} and dtypes == {torch.float32}
        assert 2 * ref_bytes == nbytes, "half the bytes of fp32 master weights"
        assert ref_buffers == {torch.float32}, "buffers (rotary tables) keep buffer_dtype"
        assert torch.equal(ref_logp, logp), "a cast once at load = a cast at every gather"


def test_the_planner_counts_a_frozen_engines_weights_in_its_compute_dtype():
    shape = ModelShape(hidden=64, layers=2, vocab=256, intermediate=128, heads=2, kv_heads=1)
    common = dict(world=2, mode="none", seq_len=32, response_len=16, model_dtype="fp32")
    frozen = dict(micro=0, trains=False, forward_micro=2)
    ref = estimate(shape, EngineSetup(**common, **frozen, param_dtype="bf16"))
    ref_fp32 = estimate(shape, EngineSetup(**common, **frozen, param_dtype="fp32"))
    actor = estimate(shape, EngineSetup(**common, micro=2, param_dtype="bf16"))
    shard = sum(-(-d0 // 2) * (n // d0) for d0, n in shape.all_tensors())  # padded shard elements
    assert ref.terms["params"] == ref.resident == 2 * shard, "bf16: 2 bytes per shard element"
    assert ref_fp32.terms["params"] == 4 * shard, "fp32 compute keeps fp32 weights"
    assert actor.terms["params"] == 4 * shard, "the actor keeps fp32 master weights"
    assert ref.host_load == 2 * shape.num_params, "loaded once on the host in bf16"
