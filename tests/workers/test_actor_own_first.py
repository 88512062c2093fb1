"""The first mini-batch of the first epoch takes its old log-probs from the update's own forward,
detached (nothing has moved the weights yet), and keeps them for the later epochs; the other rows'
come from a pass before the update over those rows only. Against the same update given the old
log-probs of a separate compute_log_prob pass over every row (1 gloo rank, fp32, the tiny model,
padded and packed): the same old log-probs, loss, grad norm and weights, and fewer forward passes --
one mini-batch and one epoch (verl's on_policy), and two mini-batches over two epochs."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh

from tests.helpers.configs import fp32_fsdp, tiny_actor, tiny_model, tiny_optim
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.workers.actor import PPOActor, compute_log_prob

ROWS, RESP, MICRO, LOGPROB_MICRO, TEMPERATURE = 6, 5, 2, 4, 0.8


def _run(rank, world, model_dir, batch, packed, own_first, mini=ROWS, epochs=1):
    cfg = tiny_actor(ppo_mini_batch_size=mini, ppo_micro_batch_size_per_gpu=MICRO, ppo_epochs=epochs)
    cfg.optim = tiny_optim(lr=1e-2, total_training_steps=4)
    engine = FSDPEngine(
        tiny_model(model_dir, use_remove_padding=packed),
        fp32_fsdp(),
        init_device_mesh("cpu", (world,)),
        role="actor",
        optim_cfg=cfg.optim,
        grad_clip=cfg.grad_clip,
    )
    forwards = Counter()  # forward passes per engine phase
    run_forward = engine.model_forward

    def counted(micro, request=None):
        forwards[engine._phase] += 1
        return run_forward(micro, request)

    engine.model_forward = counted
    actor = PPOActor(engine, cfg, RESP, TEMPERATURE)
    tensors = {k: v for k, v in batch.items() if k != "old_log_probs"}
    log_prob = dict(
        micro_size=LOGPROB_MICRO, max_token_len=None, temperature=TEMPERATURE, phase="compute_log_prob"
    )
    if own_first:  # as the worker does: a pass over the rows after the first mini-batch, then the update
        rest = {k: v[mini:] for k, v in tensors.items()}
        if len(rest["response_mask"]):
            tensors["old_log_probs"] = torch.cat(
                [torch.zeros(mini, RESP), compute_log_prob(engine, rest, **log_prob)]
            )
        metrics, old = actor.update_own_first(tensors, mini, MICRO)
    else:
        old = compute_log_prob(engine, tensors, **log_prob)
        metrics = actor.update({**tensors, "old_log_probs": old}, mini, MICRO)
    params = {name: t.clone() for name, t in engine.iter_full_params()}
    return metrics, old, params, dict(forwards)


def _compare(model_dir, batch, separate, reused):
    metrics_a, old_a, params_a, forwards_a = separate
    metrics_b, old_b, params_b, forwards_b = reused
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(old_b[mask], old_a[mask], atol=1e-5, rtol=0)
    assert (old_a[mask] != batch["old_log_probs"][mask]).all(), "the old log-probs are the model's"
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/ppo_kl", "actor/pg_clipfrac"):
        assert metrics_b[key] == pytest.approx(metrics_a[key], abs=1e-5), key
    initial = dict(run_ranks(_initial_params, 1, model_dir)[0])
    moved = max((params_a[n] - initial[n]).abs().max().item() for n in params_a)
    worst = max((params_b[n] - params_a[n]).abs().max().item() for n in params_a)
    assert moved > 1e-3 and worst < 1e-6, (moved, worst)
    return metrics_b, forwards_a, forwards_b


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_on_policy_update_reuses_its_forward(tiny_model_dir, packed):
    batch = make_ppo_batch(vocab=110, bs=ROWS, prompt_len=6, response_len=RESP, seed=5)
    (separate,) = run_ranks(_run, 1, tiny_model_dir, batch, packed, False)
    (reused,) = run_ranks(_run, 1, tiny_model_dir, batch, packed, True)
    metrics, forwards_a, forwards_b = _compare(tiny_model_dir, batch, separate, reused)
    assert metrics["actor/ppo_kl"] == 0.0 and metrics["actor/pg_clipfrac"] == 0.0  # ratio exactly 1
    updates = -(-ROWS // MICRO)
    assert forwards_a == {"compute_log_prob": -(-ROWS // LOGPROB_MICRO), "update": updates}
    assert forwards_b == {"update": updates}, "one pass fewer"


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_first_mini_batch_reuses_its_forward_over_epochs(tiny_model_dir, packed):
    """8 rows, mini-batches of 4, two epochs: the second epoch's first mini-batch must use epoch 0's
    old log-probs (its current forward would make the ratio 1 and the weights differ)."""
    rows, mini, epochs = 8, 4, 2
    batch = make_ppo_batch(vocab=110, bs=rows, prompt_len=6, response_len=RESP, seed=7)
    (separate,) = run_ranks(_run, 1, tiny_model_dir, batch, packed, False, mini, epochs)
    (reused,) = run_ranks(_run, 1, tiny_model_dir, batch, packed, True, mini, epochs)
    metrics, forwards_a, forwards_b = _compare(tiny_model_dir, batch, separate, reused)
    assert metrics["actor/ppo_kl"] != 0.0, "later mini-batches ran on moved weights"
    updates = epochs * (rows // mini) * (mini // MICRO)
    assert forwards_a == {"compute_log_prob": rows // LOGPROB_MICRO, "update": updates}
    assert forwards_b == {"compute_log_prob": (rows - mini) // LOGPROB_MICRO, "update": updates}


def _initial_params(rank, world, model_dir):
    engine = FSDPEngine(tiny_model(model_dir), fp32_fsdp(), init_device_mesh("cpu", (world,)), role="ref")
    return [(name, t.clone()) for name, t in engine.iter_full_params()]


def test_rows_after_the_first_mini_batch_need_old_log_probs():
    actor = PPOActor(engine=None, cfg=tiny_actor(), response_length=RESP, temperature=1.0)
    with pytest.raises(ValueError, match="rows after the first mini-batch need old_log_probs"):
        actor.update_own_first({"response_mask": torch.ones(4, RESP)}, 2, MICRO)
