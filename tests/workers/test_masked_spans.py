"""Updates on multi-turn batches: responses with masked spans inside (tool results, user turns:
real tokens the policy did not sample, response_mask 0, attention 1).

Real FSDP2 on 2 gloo ranks, fp32, the tiny model, 3 steps of 2 mini-batches of the actor's clipped
loss with an entropy bonus and a low-var KL loss against the reference. Checked within 1e-5:
  - invariance: micro-batch sizes, packing (use_remove_padding) and padding, dynamic batch size,
    Ulysses sequence parallelism and offload (offload_policy; manual param + optimizer offload)
    give the update of the plain run (pg_loss, kl_loss, entropy, grad_norm of every step, params);
  - the masked spans enter no loss, no denominator, no KL and no entropy: filling their advantages,
    old and reference log-probs with other garbage changes nothing, bit for bit;
  - the comparison can fail: the same spans unmasked give another update.
The critic's update likewise ignores values and returns in the spans.
"""

from __future__ import annotations

import pytest
import torch

from tests.engine.test_lever_invariance import REORDERED_PARAM_TOL, _engine
from tests.helpers.compare import assert_same_run, max_abs_diff
from tests.helpers.configs import clipped_critic, fp32_fsdp, tiny_actor
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.config.schema import OptimConfig
from verl_lite.engine.mesh import build_layout
from verl_lite.trainer.batching import dp_minibatch_order
from verl_lite.workers.actor import PPOActor

ROWS, MINI, STEPS, TOL, LR, RESP = 16, 8, 3, 1e-5, 5e-3, 12
METRICS = ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm")
BUDGET = {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 40}
VARIANTS = {
    "base": {},
    "micro1": {"micro": 1},
    "micro_whole": {"micro": 4},
    "padded": {"model": {"use_remove_padding": False}},
    "dynamic_bsz": {"actor": BUDGET},
    "sp2": {"sp": 2},
    "sp2_dynamic": {"sp": 2, "actor": BUDGET},
    "offload_policy": {"fsdp": {"offload_policy": True}},
    "param_opt_offload": {"fsdp": {"param_offload": True, "optimizer_offload": True}},
    "other_garbage": {"garbage_seed": 99},
    "unmasked": {"unmask": True},  # a different update: the comparison can fail
}


def multi_turn_batches(garbage_seed: int = 7, unmask: bool = False) -> list[dict]:
    """PPO batches whose responses are model tokens with 1-3 masked spans inside, garbage
    (advantages, old and reference log-probs) on the spans from `garbage_seed`."""
    out = []
    for step in range(STEPS):
        b = make_ppo_batch(vocab=110, bs=ROWS, prompt_len=6, response_len=RESP, seed=30 + step)
        g, junk = torch.Generator().manual_seed(40 + step), torch.Generator().manual_seed(garbage_seed + step)
        attn = b["attention_mask"][:, -RESP:].clone()
        lengths = torch.randint(6, RESP + 1, (ROWS,), generator=g)
        attn = (torch.arange(RESP).unsqueeze(0) < lengths.unsqueeze(1)).long()
        mask = attn.clone()
        for row in range(ROWS):
            for _ in range(int(torch.randint(1, 4, (1,), generator=g))):
                start = int(torch.randint(1, int(lengths[row]) - 1, (1,), generator=g))
                mask[row, start : start + int(torch.randint(1, 3, (1,), generator=g))] = 0
        mask = mask * attn
        b["attention_mask"] = torch.cat([b["attention_mask"][:, :-RESP], attn], -1)
        b["position_ids"] = (b["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        b["responses"] = torch.randint(3, 110, (ROWS, RESP), generator=g) * attn
        b["input_ids"] = torch.cat([b["input_ids"][:, :-RESP], b["responses"]], -1)
        b["response_mask"] = attn if unmask else mask
        spans = (attn - mask).bool()
        for key, scale in (("advantages", 5.0), ("old_log_probs", -4.0), ("ref_log_prob", -4.0)):
            value = (
                torch.randn(ROWS, RESP, generator=g)
                if key == "advantages"
                else -torch.rand(ROWS, RESP, generator=g)
            )
            noise = torch.rand(ROWS, RESP, generator=junk) * scale
            b[key] = torch.where(spans, noise, value * attn)
        b["values"] = torch.where(
            spans,
            torch.rand(ROWS, RESP, generator=junk) * 9,
            torch.randn(ROWS, RESP, generator=g) * 0.1 * attn,
        )
        b["returns"] = torch.where(
            spans, torch.rand(ROWS, RESP, generator=junk) * 9, torch.randn(ROWS, RESP, generator=g) * attn
        )
        out.append(b)
    return out


def _train_actor(model_dir, spec: dict):
    cfg = tiny_actor(
        grad_clip=0.5,
        entropy_coeff=0.01,
        use_kl_loss=True,
        kl_loss_coef=0.1,
        kl_loss_type="low_var_kl",
        **spec.get("actor", {}),
    )
    cfg.clip_ratio_low = cfg.clip_ratio_high = 0.2
    cfg.optim = OptimConfig(lr=LR, weight_decay=0.01, total_training_steps=STEPS)
    engine, layout = _engine(model_dir, spec, cfg.optim)
    actor = PPOActor(engine, cfg, response_length=RESP, temperature=0.9)
    dp, history = layout.dp_size, []
    for batch in multi_turn_batches(spec.get("garbage_seed", 7), spec.get("unmask", False)):
        local = {
            k: v[dp_minibatch_order(ROWS, MINI, dp).view(dp, -1)[layout.dp_rank]] for k, v in batch.items()
        }
        history.append(actor.update(local, mini_size=MINI // dp, micro_size=spec.get("micro", 2)))
    return history, {n: t.clone() for n, t in engine.iter_full_params()}


def _train_critic(rank, world, model_dir, garbage_seed: int):
    from verl_lite.engine.fsdp_engine import FSDPEngine
    from verl_lite.workers.critic import PPOCritic

    cfg = clipped_critic(model_dir, LR, STEPS)
    layout = build_layout("cpu", -1, 1)
    engine = FSDPEngine(
        cfg.model,
        fp32_fsdp(),
        layout,
        role="critic",
        optim_cfg=cfg.optim,
        grad_clip=cfg.grad_clip,
        model_kind="value",
    )
    critic, history = PPOCritic(engine, cfg, response_length=RESP), []
    for batch in multi_turn_batches(garbage_seed):
        local = {k: v[dp_minibatch_order(ROWS, MINI, world).view(world, -1)[rank]] for k, v in batch.items()}
        history.append(critic.update(local, mini_size=MINI // world, micro_size=2))
    return history, {n: t.clone() for n, t in engine.iter_full_params()}


def _run_all(rank, world, model_dir):
    runs = {name: _train_actor(model_dir, spec) for name, spec in VARIANTS.items()}
    runs["critic"] = _train_critic(rank, world, model_dir, 7)
    runs["critic_other_garbage"] = _train_critic(rank, world, model_dir, 99)
    return runs


@pytest.fixture(scope="module")
def world2(tiny_model_dir):
    return run_ranks(_run_all, 2, tiny_model_dir, timeout_s=600)[0]


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v not in ("base", "unmasked", "other_garbage")])
def test_every_lever_gives_the_same_update_on_masked_spans(world2, variant):
    tensor_tol = REORDERED_PARAM_TOL if variant.startswith(("sp2", "padded")) else TOL
    assert_same_run(
        world2["base"], world2[variant], f"masked spans, {variant}", TOL, tensor_tol, metrics=METRICS
    )


def test_masked_spans_enter_no_loss_no_denominator_no_kl_no_entropy(world2):
    """Other garbage in the spans: the same update, bit for bit."""
    assert_same_run(
        world2["base"], world2["other_garbage"], "other garbage", 0.0 + 1e-12, 1e-12, metrics=METRICS
    )
    assert_same_run(
        world2["critic"],
        world2["critic_other_garbage"],
        "critic",
        1e-12,
        1e-12,
        metrics=("critic/vf_loss", "critic/grad_norm"),
    )


def test_the_comparison_can_fail(world2):
    assert max_abs_diff(world2["base"][1], world2["unmasked"][1]) > 10 * REORDERED_PARAM_TOL
    with pytest.raises(AssertionError):
        assert_same_run(world2["base"], world2["unmasked"], "unmasked spans", TOL, metrics=METRICS)
