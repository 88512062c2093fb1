"""override_config.attn_implementation with verl's meaning (engine/attention.py): which kernel a model
runs on each machine, and packed rows giving the padded rows' log-probs under each kernel that runs here.

The GPU's choice is made by the same function from the same inputs (accelerator, installed packages),
so its table is checked here; the kernels themselves run in tests/engine/test_attention_gpu.py. Of
the GPU's fallback, flex attention, CPU torch has a forward (unfused, without torch.compile, which
would take about a minute here): the reference engine runs it, packed, against the padded sdpa path.
"""

from __future__ import annotations

import os

import pytest
import torch

from tests.helpers.configs import fp32_fsdp, tiny_model
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.config.schema import MixedPrecisionConfig
from verl_lite.engine.attention import attention_problem, select_attention
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.engine.mesh import build_layout
from verl_lite.engine.model_shape import ModelShape
from verl_lite.planner.engine_memory import estimate
from verl_lite.planner.engine_setup import EngineSetup
from verl_lite.workers.actor import compute_log_prob


def _choose(requested, **kw):
    kw.setdefault("installed", lambda package: False)
    choice = select_attention(requested, **kw)
    return choice.implementation, choice.dense_mask


def test_on_a_gpu_flash_where_installed_else_flex_and_sdpa_where_a_mask_is_needed():
    flash = {"installed": lambda package: package == "flash_attn"}
    assert _choose(None, accelerator=True, **flash) == ("flash_attention_2", False), "verl's default"
    assert _choose(None, accelerator=True) == ("flex_attention", False), "no flash_attn: block-sparse"
    assert _choose("flash_attention_3", accelerator=True, **flash) == ("flex_attention", False)
    assert _choose("sdpa", accelerator=True) == ("sdpa", True), "as asked"
    assert _choose("eager", accelerator=True) == ("eager", True)
    assert _choose(None, accelerator=True, sp_size=2) == ("sdpa", True), "ulysses wraps sdpa/eager"
    assert _choose(None, accelerator=True, generation=True) == ("sdpa", True), "HF generate"
    assert _choose(None, accelerator=True, generation=True, **flash) == ("flash_attention_2", False)


def test_on_cpu_flash_requests_keep_the_exact_sdpa_path():
    assert _choose(None, accelerator=False) == ("sdpa", True)
    assert _choose("flash_attention_2", accelerator=False, installed=lambda p: True) == ("sdpa", True)
    assert _choose("eager", accelerator=False) == ("eager", True)
    assert _choose("flex_attention", accelerator=False, trains=False) == ("flex_attention", False)
    assert _choose("flex_attention", accelerator=False) == ("sdpa", True), "no flex backward on CPU"
    why = select_attention("flash_attention_2", accelerator=False).why
    assert "GPU" in why, "a changed choice says why"


def test_an_unknown_implementation_is_refused_naming_the_key():
    problem = attention_problem({"attn_implementation": "flash_attn2"}, "critic.model")
    assert problem.startswith("critic.model.override_config.attn_implementation='flash_attn2' is not")
    assert attention_problem({}, "actor_rollout_ref.model") is None, "unset: verl's default"
    with pytest.raises(ValueError, match="attn_implementation"):
        select_attention("paged", accelerator=True)


def test_the_planner_counts_the_square_mask_only_for_sdpa_and_eager():
    shape = ModelShape(hidden=64, layers=2, vocab=256, intermediate=128, heads=2, kv_heads=1)
    base = dict(world=1, mode="none", micro=0, seq_len=512, response_len=256, trains=False, forward_micro=4)
    dense = estimate(shape, EngineSetup(**base)).terms["forward_activations"]
    varlen = estimate(shape, EngineSetup(**base, dense_mask=False)).terms["forward_activations"]
    assert dense - varlen == 4 * 512 * 512 * (1 + 4), "the boolean (rows, S, S) mask and sdpa's fp32 copy"


def _log_probs(rank, world, model_dir, param_dtype):
    os.environ["TORCHDYNAMO_DISABLE"] = "1"  # flex's unfused forward (compiling takes ~1 min on CPU)
    mp = MixedPrecisionConfig(param_dtype=param_dtype, reduce_dtype="fp32", buffer_dtype="fp32")
    batch = make_ppo_batch(vocab=110, bs=8, prompt_len=6, response_len=5, seed=7)
    out = {}
    for name, packed, kernel in (
        ("padded", False, "sdpa"),
        ("packed_sdpa", True, "sdpa"),
        ("packed_flex", True, "flex_attention"),
    ):
        model = tiny_model(
            model_dir, use_remove_padding=packed, override_config={"attn_implementation": kernel}
        )
        ref = FSDPEngine(model, fp32_fsdp(mixed_precision=mp), build_layout("cpu"), role="ref")
        logp = compute_log_prob(ref, batch, micro_size=4, max_token_len=None, temperature=1.0, phase="ref")
        out[name] = logp * batch["response_mask"], ref.module.config._attn_implementation
    return out


@pytest.mark.parametrize("param_dtype, tol", [("fp32", 1e-5), ("bf16", 5e-2)])
def test_packed_rows_give_the_padded_log_probs_with_sdpa_and_flex(tiny_model_dir, param_dtype, tol):
    for out in run_ranks(_log_probs, 2, tiny_model_dir, param_dtype):
        padded, kernel = out["padded"]
        assert kernel == "sdpa" and out["packed_flex"][1] == "flex_attention", "each runs its kernel"
        for name in ("packed_sdpa", "packed_flex"):
            torch.testing.assert_close(out[name][0], padded, atol=tol, rtol=0, msg=name)
