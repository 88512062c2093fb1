"""The critic with LoRA (critic.model.lora_rank > 0): adapters on the backbone and the value head are
trained, exactly under every split, offload mode and world size; the backbone stays bit for bit.

Real FSDP2 on gloo ranks, fp32, the tiny Qwen2 backbone with a new value head and rank-4 adapters on
every linear layer, 3 training steps of 2 mini-batches each, as tests/workers/test_critic.py does
for full fine-tuning. The trained tensors after 3 steps and every step's vf_loss and grad_norm must
match the baseline within 1e-5.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh

from tests.helpers.compare import assert_same_run
from tests.helpers.configs import clipped_critic, fp32_fsdp
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_critic_batches
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.engine.lora import base_param_name
from verl_lite.trainer.batching import dp_minibatch_order
from verl_lite.utils.hf_model import load_value_model
from verl_lite.workers.critic import PPOCritic

ROWS, MINI, STEPS, TOL, RESP = 16, 8, 3, 1e-5, 5
assert_same_trained = partial(
    assert_same_run, tol=TOL, metrics=("vf_loss", "grad_norm"), tensors="trained tensors"
)

# name -> (fsdp_config overrides, local micro size or None for the whole mini-batch)
VARIANTS = {
    "base": ({}, 2),
    "micro1": ({}, 1),
    "whole": ({}, None),
    "offload_policy": ({"offload_policy": True}, 2),
    "param_opt_offload": ({"param_offload": True, "optimizer_offload": True}, 2),
}


def _cfg(model_dir):
    cfg = clipped_critic(model_dir, 5e-3, STEPS)
    lora = {"lora_rank": 4, "lora_alpha": 8, "target_modules": "all-linear"}
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **lora))


def _hf_name(name: str) -> str:
    """A frozen parameter's name in the value model's own state dict (PEFT keeps the value head's
    original beside its trained copy)."""
    return base_param_name(name).replace(".original_module.", ".")


def _train(rank, world, model_dir, variant):
    fsdp_over, micro = VARIANTS[variant]
    cfg = _cfg(model_dir)
    engine = FSDPEngine(
        cfg.model,
        fp32_fsdp(**fsdp_over),
        init_device_mesh("cpu", (world,)),
        role="critic",
        optim_cfg=cfg.optim,
        grad_clip=cfg.grad_clip,
        model_kind="value",
    )
    critic = PPOCritic(engine, cfg, response_length=RESP)
    history = []
    for batch in make_critic_batches(STEPS, ROWS, RESP):
        rows = dp_minibatch_order(ROWS, MINI, world).view(world, -1)[rank]  # the driver's row order
        local = {k: v[rows] for k, v in batch.items()}
        metrics = critic.update(local, mini_size=MINI // world, micro_size=micro or MINI // world)
        history.append((metrics["critic/vf_loss"], metrics["critic/grad_norm"]))
    frozen = engine.frozen_names
    trained = {n: t.clone() for n, t in engine.iter_full_params(lambda n: n not in frozen)}
    base = {_hf_name(n): t.clone() for n, t in engine.iter_full_params(frozen.__contains__)}
    params = {p for p in engine.module.parameters() if p.requires_grad}
    optimized = {p for g in engine.optimizer.param_groups for p in g["params"]}
    return history, trained, base, optimized == params == set(engine.optimizer.state)


def _run_all(rank, world, model_dir, variants):
    return {v: _train(rank, world, model_dir, v) for v in variants}


@pytest.fixture(scope="module")
def world1(tiny_model_dir):
    return run_ranks(_run_all, 1, tiny_model_dir, list(VARIANTS))[0]


@pytest.fixture(scope="module")
def world2(tiny_model_dir):
    return run_ranks(_run_all, 2, tiny_model_dir, ["base", "offload_policy"])[0]


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "base"])
def test_lora_critic_variant_matches_baseline(world1, variant):
    assert_same_trained(world1["base"], world1[variant], f"world 1, {variant}")


def test_two_ranks_match_one_rank(world1, world2):
    assert_same_trained(world1["base"], world2["base"], "world 1 vs 2")
    assert_same_trained(world1["base"], world2["offload_policy"], "world 1 vs 2 with offload_policy")


def test_adapters_and_value_head_train_the_backbone_stays(world1, tiny_model_dir):
    _, trained, base, optimizer_is_trained = world1["base"]
    assert optimizer_is_trained, "gradients and AdamW state only for the adapters and the value head"
    head = [n for n in trained if ".score." in n]
    assert head and all(".modules_to_save." in n for n in head), head
    assert not [n for n in trained if ".lora_" not in n and ".score." not in n]
    fresh = dict(load_value_model(_cfg(tiny_model_dir).model, torch.float32).state_dict())
    initial_head = fresh["score.weight"]
    moved = (trained[next(n for n in head if n.endswith("weight"))] - initial_head).abs().max().item()
    assert moved > 1e-3, "the value head is trained in full"
    assert sorted(base) == sorted(fresh)
    for name, tensor in base.items():
        assert torch.equal(tensor, fresh[name]), f"{name} changed"
