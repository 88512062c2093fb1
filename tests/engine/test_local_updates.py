"""verl 0.9's separate_async updates (engine.update's `local_updates`): each mini-batch an update of
its own -- its ppo_epochs, then one step of the LR schedule -- gives exactly the weights of one update
call per mini-batch, in order, against the same old log-probs; the plain update (epochs over all
mini-batches, one LR step) does not. fp32, one gloo rank, a warm-up schedule that moves each step."""

import torch
from torch.distributed.device_mesh import init_device_mesh

from tests.helpers.configs import fp32_fsdp, tiny_actor, tiny_model
from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.config.schema import OptimConfig
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.workers.actor import PPOActor

ROWS, MINI = 8, 4


def _update(model_dir, local: bool, split: bool):
    cfg = tiny_actor(ppo_micro_batch_size_per_gpu=2, ppo_epochs=2, grad_clip=1.0)
    cfg.optim = OptimConfig(lr=1e-2, weight_decay=0.01, lr_warmup_steps=4, total_training_steps=8)
    engine = FSDPEngine(
        tiny_model(model_dir), fp32_fsdp(), init_device_mesh("cpu", (1,)), role="actor", optim_cfg=cfg.optim
    )
    batch = make_ppo_batch(vocab=110, bs=ROWS, response_len=5, seed=7)
    actor = PPOActor(engine, cfg, response_length=5, temperature=1.0, local_updates=local)
    parts = (
        [{k: v[i : i + MINI] for k, v in batch.items()} for i in range(0, ROWS, MINI)] if split else [batch]
    )
    for part in parts:
        actor.update(part, mini_size=MINI, micro_size=2)
    lr = engine.lr_scheduler.get_last_lr()[0]
    return lr, {name: t.clone() for name, t in engine.iter_full_params()}


def _three_ways(rank, world, model_dir):
    """local_updates over both mini-batches; one plain call per mini-batch; one plain call for both."""
    return [
        _update(model_dir, local, split) for local, split in ((True, False), (False, True), (False, False))
    ]


def test_local_updates_are_one_update_per_mini_batch(tiny_model_dir):
    (local_lr, local), (split_lr, split), (plain_lr, plain) = run_ranks(_three_ways, 1, tiny_model_dir)[0]
    assert local_lr == split_lr > plain_lr  # two steps of the warm-up against one
    for name in split:
        assert torch.equal(local[name], split[name]), name
    assert any(not torch.equal(local[n], plain[n]) for n in split)
