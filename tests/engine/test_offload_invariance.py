"""Invariance: every offload mode, micro-batch split, sync schedule and world size gives the same update.

Real FSDP2 on gloo ranks, fp32, the tiny model, 3 consecutive training steps of 2 mini-batches
each (so optimizer state makes round trips through the host). Each variant trains a fresh engine
on the same data; parameters after 3 steps, and every step's pg_loss and grad_norm, must match
the baseline within 1e-5. World 1 and world 2 are compared too, through the driver's row order.
"""

from __future__ import annotations

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh

from tests.helpers.compare import assert_same_run
from tests.helpers.configs import fp32_fsdp, tiny_actor, tiny_model
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.config.schema import OptimConfig
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.trainer.batching import dp_minibatch_order
from verl_lite.workers.actor import PPOActor, compute_log_prob

ROWS, MINI, STEPS, TOL = 16, 8, 3, 1e-5

# name -> (fsdp_config overrides, actor overrides, gradient checkpointing, local micro size or None for whole)
VARIANTS = {
    "base": ({}, {}, False, 2),
    "micro1": ({}, {}, False, 1),
    "micro4": ({}, {}, False, 4),
    "whole": ({}, {}, False, None),
    "offload_policy": ({"offload_policy": True}, {}, False, 2),
    "param_opt_offload": ({"param_offload": True, "optimizer_offload": True}, {}, False, 2),
    "reduce_last_only": ({"reduce_scatter_every_micro_batch": False}, {}, False, 2),
    "reduce_last_policy": ({"reduce_scatter_every_micro_batch": False, "offload_policy": True}, {}, False, 2),
    "dynamic_bsz": ({}, {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 24}, False, 2),
    "grad_ckpt": ({}, {}, True, 2),
    "grad_ckpt_param_opt": ({"param_offload": True, "optimizer_offload": True}, {}, True, 2),
    "grad_ckpt_policy": ({"offload_policy": True}, {}, True, 2),
    "no_reshard_prefetch": ({"reshard_after_forward": False, "forward_prefetch": True}, {}, False, 2),
    "param_offload_only": ({"param_offload": True}, {}, False, 2),
    "optimizer_offload_only": ({"optimizer_offload": True}, {}, False, 4),
    "dynamic_bsz_policy": (
        {"offload_policy": True},
        {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 24},
        False,
        2,
    ),
    "dynamic_bsz_param_opt_last": (
        {"param_offload": True, "optimizer_offload": True, "reduce_scatter_every_micro_batch": False},
        {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 24},
        True,
        2,
    ),
}
LOSS_AGG_MODES = ("seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def _batches():
    return [
        make_ppo_batch(vocab=110, bs=ROWS, prompt_len=6, response_len=5, seed=10 + s) for s in range(STEPS)
    ]


def _train(rank, world, model_dir, variant, loss_agg_mode="token-mean"):
    fsdp_over, actor_over, grad_ckpt, micro = VARIANTS[variant]
    mesh = init_device_mesh("cpu", (world,))
    actor_cfg = tiny_actor(loss_agg_mode=loss_agg_mode, grad_clip=0.5, **actor_over)
    actor_cfg.clip_ratio_low = actor_cfg.clip_ratio_high = 0.2
    actor_cfg.optim = OptimConfig(lr=5e-3, weight_decay=0.01, total_training_steps=STEPS)
    engine = FSDPEngine(
        tiny_model(model_dir, enable_gradient_checkpointing=grad_ckpt),
        fp32_fsdp(**fsdp_over),
        mesh,
        role="actor",
        optim_cfg=actor_cfg.optim,
        grad_clip=actor_cfg.grad_clip,
    )
    # eps 1e-6, not verl's 1e-8: the k_proj biases have an exactly-zero gradient in exact arithmetic
    # (softmax ignores a shift shared by all keys), so their fp32 gradient is reduction-order noise that
    # AdamW with eps 1e-8 turns into a full lr-sized step (1.6e-5 apart between layouts under the large
    # loss scale of seq-mean-token-sum on CI's CPU). The engine's exactness is what is compared here.
    for group in engine.optimizer.param_groups:
        group["eps"] = 1e-6
    actor = PPOActor(engine, actor_cfg, response_length=5, temperature=1.0)
    local_mini = MINI // world
    history = []
    for batch in _batches():
        order = dp_minibatch_order(ROWS, MINI, world)  # what the driver does before dispatch
        rows = order.view(world, -1)[rank]
        local = {k: v[rows] for k, v in batch.items()}
        metrics = actor.update(local, mini_size=local_mini, micro_size=micro or local_mini)
        history.append((metrics["actor/pg_loss"], metrics["actor/grad_norm"]))
    engine_metrics, transfers = engine.pop_metrics()
    params = {n: t.clone() for n, t in engine.iter_full_params()}
    moved = {phase: (t.h2d_bytes, t.d2h_bytes) for phase, t in transfers.items()}
    shard_bytes = sum(p.to_local().numel() * 4 for p in engine.module.parameters())
    return history, params, (moved, shard_bytes)


def _ref_uses(rank, world, model_dir, param_offload):
    """Two uses of a reference engine (forward only), as compute_ref_log_prob makes them."""
    mesh = init_device_mesh("cpu", (world,))
    engine = FSDPEngine(tiny_model(model_dir), fp32_fsdp(param_offload=param_offload), mesh, role="ref")
    storage = lambda: [p.to_local().data_ptr() for p in engine.module.parameters()]  # noqa: E731
    between, inside, logps = [storage()], [], []
    for batch in _batches()[:2]:
        local = {k: v.chunk(world)[rank] for k, v in batch.items()}
        with engine.phase("compute_ref_log_prob"):
            inside.append(storage())
            logps.append(
                compute_log_prob(engine, local, micro_size=4, max_token_len=None, temperature=1.0, phase="x")
            )
        between.append(storage())
    _, transfers = engine.pop_metrics()
    moved = {phase: (t.h2d_bytes, t.d2h_bytes) for phase, t in transfers.items()}
    shard_bytes = sum(p.to_local().numel() * 4 for p in engine.module.parameters())
    return logps, moved, shard_bytes, between, inside


def _run_all(rank, world, model_dir, variants, modes=(), mode_variants=("whole", "micro1")):
    out = {v: _train(rank, world, model_dir, v) for v in variants}
    for mode in modes:
        for v in mode_variants:
            out[f"{v}:{mode}"] = _train(rank, world, model_dir, v, loss_agg_mode=mode)
    out["ref"] = {flag: _ref_uses(rank, world, model_dir, flag) for flag in (False, True)}
    return out


@pytest.fixture(scope="module")
def world1(tiny_model_dir):
    return run_ranks(_run_all, 1, tiny_model_dir, list(VARIANTS), LOSS_AGG_MODES)[0]


@pytest.fixture(scope="module")
def world2(tiny_model_dir):
    # every loss_agg_mode also on two ranks, one micro-batch per sequence, params and grads offloaded
    results = run_ranks(_run_all, 2, tiny_model_dir, list(VARIANTS), LOSS_AGG_MODES, ("offload_policy",))
    return results[0]


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "base"])
def test_variant_matches_baseline_on_one_rank(world1, variant):
    assert_same_run(world1["base"], world1[variant], f"world 1, {variant}", TOL)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "base"])
def test_variant_matches_baseline_on_two_ranks(world2, variant):
    assert_same_run(world2["base"], world2[variant], f"world 2, {variant}", TOL)


def test_two_ranks_match_one_rank(world1, world2):
    assert_same_run(world1["base"], world2["base"], "world 1 vs 2", TOL)
    assert_same_run(
        world1["param_opt_offload"], world2["offload_policy"], "world 1 manual vs world 2 policy", TOL
    )


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_every_loss_agg_mode_is_split_invariant(world1, mode):
    assert_same_run(world1[f"whole:{mode}"], world1[f"micro1:{mode}"], mode, TOL)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_every_loss_agg_mode_is_world_and_offload_invariant(world1, world2, mode):
    assert_same_run(
        world1[f"whole:{mode}"], world2[f"offload_policy:{mode}"], f"{mode}, world 2 offload_policy", TOL
    )


def test_the_comparison_can_fail(world1):
    """Different loss_agg_modes give different updates: the checks above are not vacuous."""
    with pytest.raises(AssertionError):
        assert_same_run(
            world1["whole"], world1["whole:seq-mean-token-sum"], "token-mean vs seq-mean-token-sum", TOL
        )


def test_manual_offload_really_moves_and_counts_bytes(world1):
    base_moves, _ = world1["base"][2]
    assert all(h2d == d2h == 0 for h2d, d2h in base_moves.values())
    moves, shard_bytes = world1["param_opt_offload"][2]
    assert moves["init"] == (0, shard_bytes), "params leave the device once built"
    h2d, d2h = moves["update"]
    # per step: params in and out once for the whole update phase, and Adam's two moments (each the
    # params' size) in and out around each of the 2 optimizer steps -- except the first step's inbound
    # copy, when the state does not exist yet
    steps, minis = STEPS, ROWS // MINI
    assert d2h == steps * shard_bytes + steps * minis * 2 * shard_bytes
    assert h2d == steps * shard_bytes + (steps * minis - 1) * 2 * shard_bytes


@pytest.mark.parametrize("world", ["world1", "world2"])
def test_ref_params_wait_on_the_host_between_its_uses(world, request):
    """ref.fsdp_config.param_offload: in for each use, out after it (new storage each way), same log-probs."""
    plain, offloaded = (
        request.getfixturevalue(world)["ref"][False],
        request.getfixturevalue(world)["ref"][True],
    )
    (logps_a, moved_a, _, between_a, _), (logps_b, moved_b, shard_bytes, between_b, inside_b) = (
        plain,
        offloaded,
    )
    assert all(torch.equal(a, b) for a, b in zip(logps_a, logps_b)), "offloading must not change log-probs"
    assert all(h2d == d2h == 0 for h2d, d2h in moved_a.values())
    assert all(b == between_a[0] for b in between_a), "without offload the params never move"
    assert moved_b["init"] == (0, shard_bytes), "the ref's params go to the host as soon as it is built"
    assert moved_b["compute_ref_log_prob"] == (2 * shard_bytes, 2 * shard_bytes), "in and out once per use"
    for before, during, after in zip(between_b, inside_b, between_b[1:]):
        # per parameter: the old storage is alive while its copy is made, so equal addresses mean no move
        assert all(x != y for x, y in zip(before, during)) and all(x != y for x, y in zip(during, after))
