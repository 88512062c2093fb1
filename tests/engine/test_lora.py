"""LoRA on FSDP2: adapters are trained exactly under every split, offload mode and world size; the
base stays bit for bit; the reference is the same model with the adapters off.

Real FSDP2 on gloo ranks, fp32, the tiny model with rank-8 adapters on every linear layer, 3 training
steps of 2 mini-batches each (as tests/engine/test_offload_invariance.py does for full fine-tuning).
Every variant trains a fresh engine on the same data; adapter parameters after 3 steps, and every
step's pg_loss and grad_norm, must match the baseline within 1e-5. Measured margins: offload modes
are bit-identical; splits and world sizes differ by at most 8e-7 in adapters and 2e-8 in losses.
The learning rate is the full fine-tuning suite's (5e-3): at 5e-2 Adam's first steps amplify
summation-order noise in near-zero gradient coordinates to ~2e-3 while losses still agree to 1e-8.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh
from transformers import AutoModelForCausalLM

from tests.helpers.compare import assert_same_run
from tests.helpers.configs import fp32_fsdp, tiny_actor, tiny_model, tiny_optim
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.config.schema import ModelConfig
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.engine.lora import base_param_name
from verl_lite.trainer.batching import dp_minibatch_order
from verl_lite.workers.actor import PPOActor, compute_log_prob

ROWS, MINI, STEPS, TOL = 16, 8, 3, 1e-5
assert_same_lora = partial(assert_same_run, tol=TOL, tensors="adapters", steps=STEPS)

# name -> (fsdp_config overrides, actor overrides, gradient checkpointing, local micro size or None for whole)
VARIANTS = {
    "base": ({}, {}, False, 2),
    "micro1": ({}, {}, False, 1),
    "whole": ({}, {}, False, None),
    "offload_policy": ({"offload_policy": True}, {}, False, 2),
    "param_opt_offload": ({"param_offload": True, "optimizer_offload": True}, {}, False, 2),
    "reduce_last_policy": ({"reduce_scatter_every_micro_batch": False, "offload_policy": True}, {}, False, 1),
    "dynamic_bsz_grad_ckpt": ({}, {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 24}, True, 2),
}


def lora_model_cfg(path: str, grad_ckpt: bool = False) -> ModelConfig:
    return tiny_model(
        path, lora_rank=8, lora_alpha=16, target_modules="all-linear", enable_gradient_checkpointing=grad_ckpt
    )


def _batches():
    return [
        make_ppo_batch(vocab=110, bs=ROWS, prompt_len=6, response_len=5, seed=10 + s) for s in range(STEPS)
    ]


def _engine(world, model_cfg, fsdp_over=None, optim=True):
    actor_cfg = tiny_actor(
        loss_agg_mode="token-mean",
        grad_clip=0.5,
        ppo_epochs=1,
        entropy_coeff=0.0,
        use_kl_loss=False,
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
        optim=tiny_optim(lr=5e-3, weight_decay=0.01, total_training_steps=STEPS),
    )
    fsdp = fp32_fsdp(**(fsdp_over or {}))
    engine = FSDPEngine(
        model_cfg,
        fsdp,
        init_device_mesh("cpu", (world,)),
        role="actor",
        optim_cfg=actor_cfg.optim if optim else None,
        grad_clip=actor_cfg.grad_clip,
    )
    return engine, actor_cfg


def _train(rank, world, model_dir, variant):
    fsdp_over, actor_over, grad_ckpt, micro = VARIANTS[variant]
    model_cfg = lora_model_cfg(model_dir, grad_ckpt)
    engine, actor_cfg = _engine(world, model_cfg, fsdp_over)
    actor_cfg = dataclasses.replace(actor_cfg, **actor_over)
    actor = PPOActor(engine, actor_cfg, response_length=5, temperature=1.0)
    local_mini = MINI // world
    history = []
    for batch in _batches():
        rows = dp_minibatch_order(ROWS, MINI, world).view(world, -1)[rank]
        local = {k: v[rows] for k, v in batch.items()}
        metrics = actor.update(local, mini_size=local_mini, micro_size=micro or local_mini)
        history.append((metrics["actor/pg_loss"], metrics["actor/grad_norm"]))
    _, transfers = engine.pop_metrics()
    adapters = {n: t.clone() for n, t in engine.iter_full_params(lambda n: n not in engine.frozen_names)}
    base = {
        base_param_name(n): t.clone() for n, t in engine.iter_full_params(engine.frozen_names.__contains__)
    }
    trained = {p for p in engine.module.parameters() if p.requires_grad}
    optimizer_params = {p for g in engine.optimizer.param_groups for p in g["params"]}
    info = {
        "optimizer_is_adapters": optimizer_params == trained and set(engine.optimizer.state) == trained,
        "num_trainable": engine.num_trainable_params(),
        "num_params": engine.num_params(),
        "policy_grad_bytes": {p: t.d2h_bytes for p, t in transfers.items() if not t.timed},
        "adapter_shard_bytes": sum(p.to_local().numel() * 4 for p in trained),
    }
    return history, adapters, base, info


def _reference(rank, world, model_dir):
    """Log-probs of a plain (no LoRA) engine, and of a trained LoRA engine with adapters off and on."""
    batch = {k: v.chunk(world)[rank] for k, v in _batches()[0].items()}

    def logp(engine):
        return compute_log_prob(engine, batch, micro_size=4, max_token_len=None, temperature=1.0, phase="x")

    plain, _ = _engine(world, tiny_model(model_dir), optim=False)
    lora, actor_cfg = _engine(world, lora_model_cfg(model_dir))
    actor = PPOActor(lora, actor_cfg, response_length=5, temperature=1.0)
    before = logp(lora)
    full = _batches()[1]
    actor.update({k: v.chunk(world)[rank] for k, v in full.items()}, mini_size=ROWS // world, micro_size=4)
    with lora.adapters_disabled():
        disabled = logp(lora)
    return {"plain": logp(plain), "lora_init": before, "disabled": disabled, "enabled": logp(lora)}


def _run_all(rank, world, model_dir):
    out = {v: _train(rank, world, model_dir, v) for v in VARIANTS}
    out["ref"] = _reference(rank, world, model_dir)
    return out


@pytest.fixture(scope="module")
def world1(tiny_model_dir):
    return run_ranks(_run_all, 1, tiny_model_dir)[0]


@pytest.fixture(scope="module")
def world2(tiny_model_dir):
    return run_ranks(_run_all, 2, tiny_model_dir)[0]


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "base"])
@pytest.mark.parametrize("world", ["world1", "world2"])
def test_lora_variant_matches_baseline(world, variant, request):
    results = request.getfixturevalue(world)
    assert_same_lora(results["base"], results[variant], f"{world}, {variant}")


def test_two_ranks_match_one_rank(world1, world2):
    assert_same_lora(world1["base"], world2["base"], "world 1 vs 2")
    assert_same_lora(
        world1["param_opt_offload"], world2["offload_policy"], "world 1 manual vs world 2 policy"
    )


def test_adapters_move_and_the_comparison_can_fail(world1):
    """The adapters really train (lora_B starts at 0), so equal adapters above are not vacuous."""
    _, adapters, _, _ = world1["base"]
    lora_b = [t for n, t in adapters.items() if "lora_B" in n]
    assert lora_b and all(t.abs().max() > 1e-3 for t in lora_b)
    moved = dict(world1["base"][1])
    moved[next(iter(moved))] = moved[next(iter(moved))] + 1e-3
    with pytest.raises(AssertionError):
        assert_same_lora(world1["base"], (world1["base"][0], moved, None, None), "perturbed")


@pytest.mark.parametrize("world", ["world1", "world2"])
def test_base_weights_stay_bit_for_bit(world, request, tiny_model_dir):
    original = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    for variant, (_, _, base, _) in request.getfixturevalue(world).items():
        if variant == "ref":
            continue
        assert set(base) == {k for k in original if k != "lm_head.weight"}, variant  # lm_head is tied
        changed = [k for k, t in base.items() if not torch.equal(t, original[k])]
        assert not changed, f"{world}, {variant}: base weights changed: {changed}"


def test_gradients_and_optimizer_state_only_for_adapters(world1, world2):
    for results in (world1, world2):
        for variant, (_, adapters, _, info) in results.items():
            if variant == "ref":
                continue
            assert info["optimizer_is_adapters"], variant
            assert all(".lora_A." in n or ".lora_B." in n for n in adapters), variant
            assert info["num_trainable"] == sum(t.numel() for t in adapters.values())
            assert 0 < info["num_trainable"] < info["num_params"] // 5


def test_offload_policy_reduces_only_adapter_grads(world2):
    _, _, _, info = world2["offload_policy"]
    grad_bytes = info["policy_grad_bytes"]["update"]
    # one reduce per micro-batch: 3 steps x 2 mini-batches x (4 local rows / 2 per micro)
    assert grad_bytes == STEPS * 2 * 2 * info["adapter_shard_bytes"]


@pytest.mark.parametrize("world", ["world1", "world2"])
def test_reference_is_the_base_with_adapters_off(world, request):
    ref = request.getfixturevalue(world)["ref"]
    # fresh adapters (lora_B = 0) change nothing; after an update, off = the base, on = the new policy
    assert torch.allclose(ref["lora_init"], ref["plain"], atol=1e-6, rtol=0)
    assert torch.allclose(ref["disabled"], ref["plain"], atol=1e-6, rtol=0)
    assert (ref["enabled"] - ref["plain"]).abs().max() > 1e-3, "the update must move the policy"


def _fused_head_adapter(rank, world, model_dir):
    cfg = tiny_model(model_dir, lora_rank=8, target_modules=["q_proj", "lm_head"], use_fused_kernels=True)
    try:
        _engine(world, cfg)
    except ValueError as e:
        return str(e)
    return None


def test_an_adapter_on_the_fused_head_is_refused_by_the_engine(tiny_model_dir):
    """The start-up check (workers/lora_checks.py) refuses it before Ray; the engine does too, so a
    fused request can never reach the adapter's wrapper instead of the TokenHead."""
    message = run_ranks(_fused_head_adapter, 1, tiny_model_dir)[0]
    assert message and "use_fused_kernels=True cannot run with a LoRA adapter on the LM head" in message
