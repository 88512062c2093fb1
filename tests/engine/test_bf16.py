"""bf16 param_dtype (verl's default compute dtype on GPUs) on CPU: the LoRA, KL and offload paths.

The invariance suites run fp32 (bf16 is ~10x slower on these CPUs and ~6e-3 off), so these runs are
tiny: 2 gloo ranks, 8 rows of 5 response tokens, 2 steps of one mini-batch each (on-policy, as verl's
LoRA GRPO scripts set ppo_mini_batch_size = train_batch_size). fp32 master weights and reductions,
bf16 forward and backward, as verl's defaults. Each path must train in bf16 as it does in fp32:

- LoRA with a KL loss: the reference's log-probs (the actor with its adapters off) come first in the
  update's call, as update_actor makes them; that first forward used to leave FSDP2 believing nothing
  was trainable, and the update then crashed assigning bf16 gradients to fp32 params (verl's
  examples/grpo_trainer/run_qwen2_5-3b_gsm8k_grpo_lora.sh, tests/special_e2e/run_grpo_lora_with_merge.sh);
- full fine-tuning with a KL loss against its own reference engine, the reference's params offloaded
  (those scripts' ref.fsdp_config.param_offload=True);
- the offload modes: param + optimizer offload and offload_policy give the bf16 update of no offload.
"""

from __future__ import annotations

import contextlib
import math

import pytest
from torch.distributed.device_mesh import init_device_mesh

from tests.helpers.compare import assert_same_run
from tests.helpers.configs import fp32_fsdp, tiny_actor, tiny_model, tiny_optim
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.config.schema import MixedPrecisionConfig
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.workers.actor import PPOActor, compute_log_prob

ROWS, STEPS, RESPONSE = 8, 2, 5
BF16 = MixedPrecisionConfig(param_dtype="bf16", reduce_dtype="fp32", buffer_dtype="fp32")
LORA = dict(lora_rank=8, lora_alpha=16, target_modules="all-linear")
# name -> (bf16?, LoRA?, KL loss?, actor fsdp_config overrides)
RUNS = {
    "lora_kl": (True, True, True, {}),
    "lora_kl_fp32": (False, True, True, {}),
    "kl": (True, False, True, {}),
    "kl_fp32": (False, False, True, {}),
    "plain": (True, False, False, {}),
    "param_opt_offload": (True, False, False, {"param_offload": True, "optimizer_offload": True}),
    "offload_policy": (True, False, False, {"offload_policy": True}),
}


def _fsdp(bf16: bool, **changes):
    return fp32_fsdp(**({"mixed_precision": BF16} if bf16 else {}), **changes)


def _train(rank, world, model_dir, name):
    bf16, lora, kl, fsdp_over = RUNS[name]
    mesh = init_device_mesh("cpu", (world,))
    model = tiny_model(model_dir, **(LORA if lora else {}))
    cfg = tiny_actor(
        use_kl_loss=kl,
        kl_loss_coef=0.1,
        kl_loss_type="low_var_kl",
        ppo_epochs=1,
        optim=tiny_optim(lr=5e-3, total_training_steps=STEPS),
    )
    actor = FSDPEngine(
        model, _fsdp(bf16, **fsdp_over), mesh, role="actor", optim_cfg=cfg.optim, grad_clip=cfg.grad_clip
    )
    ref = actor
    if kl and not lora:  # its own reference engine; verl's scripts offload the reference's params
        ref = FSDPEngine(tiny_model(model_dir), _fsdp(bf16, param_offload=True), mesh, role="ref")
    ppo = PPOActor(actor, cfg, response_length=RESPONSE, temperature=1.0)
    history = []
    for step in range(STEPS):
        batch = make_ppo_batch(vocab=110, bs=ROWS, response_len=RESPONSE, seed=30 + step)
        local = {
            k: v.chunk(world)[rank] for k, v in batch.items() if k not in ("old_log_probs", "ref_log_prob")
        }
        if kl:  # update_actor: the reference's log-probs first, in the same call
            with actor.adapters_disabled() if lora else contextlib.nullcontext():
                local["ref_log_prob"] = compute_log_prob(
                    ref, local, micro_size=2, max_token_len=None, temperature=1.0, phase="ref"
                )
        metrics, _ = ppo.update_own_first(local, mini_size=ROWS // world, micro_size=2)
        history.append({k.removeprefix("actor/"): v for k, v in metrics.items()})
        actor.end_training_step()
    trained = {n: t.float().clone() for n, t in actor.iter_full_params(lambda n: n not in actor.frozen_names)}
    return history, trained


def _run_all(rank, world, model_dir):
    return {name: _train(rank, world, model_dir, name) for name in RUNS}


@pytest.fixture(scope="module")
def runs(tiny_model_dir):
    return run_ranks(_run_all, 2, tiny_model_dir)[0]


@pytest.mark.parametrize("name", ["lora_kl", "kl"])
def test_kl_paths_train_in_bf16_as_in_fp32(runs, name):
    (history, trained), (history32, trained32) = runs[name], runs[f"{name}_fp32"]
    for step, (m, m32) in enumerate(zip(history, history32, strict=True)):
        assert all(math.isfinite(m[k]) for k in ("pg_loss", "grad_norm", "kl_loss")), (name, step, m)
        # bf16 forwards are ~6e-3 off in log-probs; the losses are means of such terms
        assert abs(m["pg_loss"] - m32["pg_loss"]) < 2e-2, (name, step, m["pg_loss"], m32["pg_loss"])
        assert abs(m["grad_norm"] - m32["grad_norm"]) < 0.05 * m32["grad_norm"], (name, step)
    assert history[-1]["kl_loss"] > 0, "after a step the actor has moved off its reference"
    assert sorted(trained) == sorted(trained32) and trained
    if name == "lora_kl":
        assert all(".lora_A." in n or ".lora_B." in n for n in trained)
        assert all(t.abs().max() > 1e-3 for n, t in trained.items() if ".lora_B." in n), "adapters train"


@pytest.mark.parametrize("name", ["param_opt_offload", "offload_policy"])
def test_offload_modes_give_the_same_bf16_update(runs, name):
    # the same bf16 kernels on the same shards, only stored elsewhere between uses
    plain, other = runs["plain"], runs[name]
    assert_same_run(plain, other, f"bf16 {name}", 1e-6, steps=STEPS)
