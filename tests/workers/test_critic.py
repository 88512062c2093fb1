"""The critic: values read where the actor reads logits, and an update that every micro-batch split,
offload mode, packing mode and world size computes identically.

Real FSDP2 on gloo ranks, fp32, a tiny Qwen2 backbone with a new value head, 3 training steps of
2 mini-batches each. Each variant trains a fresh critic on the same data; params after 3 steps
and every step's vf_loss and grad_norm must match the baseline within 1e-5. All variants of one
world size run in one pair of spawned processes (start-up dominates at this size).
"""

from __future__ import annotations

import dataclasses
from functools import partial

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh

from tests.helpers.compare import assert_same_run, max_abs_diff
from tests.helpers.configs import clipped_critic, fp32_fsdp, tiny_critic
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_critic_batches
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.trainer.batching import dp_minibatch_order
from verl_lite.utils.hf_model import load_value_model
from verl_lite.workers.critic import PPOCritic

ROWS, MINI, STEPS, TOL, RESP, LR = 16, 8, 3, 1e-5, 5, 5e-3
# Adam's eps, raised from torch's 1e-8 so that comparing params measures how well gradients agree.
# Adam's first step moves coordinate i by lr * g_i / (|g_i| + eps), so float rounding delta in a
# gradient that is itself near zero (the attention biases here) moves it by up to lr * delta / eps:
# a gain of 5e5 at lr 5e-3, eps 1e-8, where splits that sum in a different order (micro-batches cut
# to their own columns, packed rows, a second rank's reduce) put rounding-level differences.
# Measured: params of the variants below differ by up to 1.4e-5 with eps 1e-8 and 1.5e-6 with eps
# 1e-6, while a different loss (test_the_comparison_can_fail) moves them by 5e-2 either way. So every
# comparison holds params to TOL, not a looser tolerance for the reordered variants.
ADAM_EPS = 1e-6
METRICS = ("critic/vf_loss", "critic/grad_norm", "critic/vf_clipfrac")
assert_same_values = partial(assert_same_run, tol=TOL, metrics=METRICS)

# name -> (fsdp_config overrides, critic overrides, remove padding, local micro size or None for whole)
VARIANTS = {
    "base": ({}, {}, False, 2),
    "micro1": ({}, {}, False, 1),
    "whole": ({}, {}, False, None),
    "offload_policy": ({"offload_policy": True}, {}, False, 2),
    "param_opt_offload": ({"param_offload": True, "optimizer_offload": True}, {}, False, 2),
    "dynamic_bsz": ({}, {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 24}, False, 2),
    "remove_padding": ({}, {}, True, 2),
    "seq_mean": ({}, {"loss_agg_mode": "seq-mean-token-mean"}, False, None),
}


def _critic(world, model_dir, variant):
    fsdp_over, critic_over, packed, _ = VARIANTS[variant]
    cfg = clipped_critic(model_dir, LR, STEPS)
    cfg.model.use_remove_padding = packed
    cfg = dataclasses.replace(cfg, **critic_over)
    engine = FSDPEngine(
        cfg.model,
        fp32_fsdp(**fsdp_over),
        init_device_mesh("cpu", (world,)),
        role="critic",
        optim_cfg=cfg.optim,
        grad_clip=cfg.grad_clip,
        model_kind="value",
    )
    for group in engine.optimizer.param_groups:
        group["eps"] = ADAM_EPS
    return engine, PPOCritic(engine, cfg, response_length=RESP)


def _train(rank, world, model_dir, variant):
    micro = VARIANTS[variant][3]
    engine, critic = _critic(world, model_dir, variant)
    history, first_values = [], None
    for batch in make_critic_batches(STEPS, ROWS, RESP):
        rows = dp_minibatch_order(ROWS, MINI, world).view(world, -1)[rank]  # the driver's row order
        local = {k: v[rows] for k, v in batch.items()}
        values = critic.compute_values(local, micro_size=micro or ROWS, max_token_len=None)
        first_values = values if first_values is None else first_values
        metrics = critic.update(local, mini_size=MINI // world, micro_size=micro or MINI // world)
        history.append(metrics)
    params = {n: t.clone() for n, t in engine.iter_full_params()}
    return history, params, first_values


def _run_all(rank, world, model_dir, variants):
    return {v: _train(rank, world, model_dir, v) for v in variants}


@pytest.fixture(scope="module")
def world1(tiny_model_dir):
    return run_ranks(_run_all, 1, tiny_model_dir, list(VARIANTS))[0]


@pytest.fixture(scope="module")
def world2(tiny_model_dir):
    return run_ranks(_run_all, 2, tiny_model_dir, ["base", "micro1", "offload_policy", "remove_padding"])


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v not in ("base", "seq_mean")])
def test_variant_matches_baseline_on_one_rank(world1, variant):
    assert_same_values(world1["base"], world1[variant], f"world 1, {variant}")


@pytest.mark.parametrize("variant", ["micro1", "offload_policy", "remove_padding"])
def test_variant_matches_baseline_on_two_ranks(world2, variant):
    assert_same_values(world2[0]["base"], world2[0][variant], f"world 2, {variant}")


def test_two_ranks_match_one_rank(world1, world2):
    assert_same_values(world1["base"], world2[0]["base"], "world 1 vs 2")
    values = torch.cat([world2[0]["base"][2], world2[1]["base"][2]])
    order = dp_minibatch_order(ROWS, MINI, 2)
    torch.testing.assert_close(values, world1["base"][2][order], atol=1e-6, rtol=0)


def test_the_comparison_can_fail(world1):
    """A different loss aggregation gives a different update: the checks above are not vacuous."""
    with pytest.raises(AssertionError):
        assert_same_values(world1["whole"], world1["seq_mean"], "token-mean vs seq-mean-token-mean")
    worst = max_abs_diff(world1["whole"][1], world1["seq_mean"][1])
    assert worst > 100 * TOL, f"a different loss moves params by only {worst}"


def test_metrics_are_live(world1):
    """Clipping happens (cliprange 0.2 against unit-scale returns) and the loss falls over 3 steps."""
    hist = world1["base"][0]
    assert all(0.0 < m["critic/vf_clipfrac"] <= 1.0 for m in hist)
    assert all(m["critic/grad_norm"] > 0 and m["critic/lr"] > 0 for m in hist)
    assert {"critic/vf_loss", "critic/vpred_mean"} <= set(hist[0])


def test_values_are_the_value_heads_output_before_each_response_token(world1, tiny_model_dir):
    """Against a plain (unsharded) forward of the same value model: position P + t - 1, masked."""
    model = load_value_model(tiny_critic(tiny_model_dir).model, torch.float32).eval()
    batch = make_critic_batches(1, ROWS, RESP)[0]
    with torch.no_grad():
        out = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits[..., 0]
    expected = out[:, -RESP - 1 : -1] * batch["response_mask"]
    torch.testing.assert_close(world1["base"][2], expected, atol=1e-5, rtol=0)
    assert expected.abs().sum() > 0
    assert model.score.bias.abs().sum() == 0  # the new head's bias starts at 0 (documented init)
