"""The next step's rollout queued behind this step's update (trainer/rollout_prefetch.py).

Two real runs of the trainer (Ray, 2 workers, the HF rollout, the tiny model), one queueing early and
one not, must log the same metrics at every step and write the same checkpoint state; the run's
shape (5 steps, a checkpoint after step 3, validation after steps 4 and 5) leaves exactly steps 1
and 2 to queue early. Plus the sampler peek the queueing relies on.
"""

import json
import os

import pytest
import torch

from tests.test_main_ppo import NONDETERMINISTIC
from tests.trainer.test_extensions import ARR, load
from verl_lite.config.schema import TINY_VAL
from verl_lite.data.rlhf_dataset import EpochSampler
from verl_lite.main_ppo import load_inputs, start_trainer
from verl_lite.trainer.rollout_prefetch import peek_next_indices

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("drawn", [0, 2, 3])  # 3 batches per epoch: the peek crosses into epoch 1
def test_peek_gives_the_next_batch_and_leaves_the_sampler_alone(drawn):
    sampler = EpochSampler(10, 3, shuffle=True, seed=7)
    it = sampler.epoch_batches()
    for _ in range(drawn):
        next(it)
    state = sampler.state_dict()
    peeked = peek_next_indices(sampler)
    assert sampler.state_dict() == state
    following = next(it, None)
    if following is None:  # the loop starts the next epoch
        following = next(sampler.epoch_batches())
    assert peeked == following


def _train(tmp_path, ray_local, prefetch: bool):
    cfg = load(
        tmp_path,
        f"data.val_files={TINY_VAL}",
        "data.val_max_samples=8",
        "trainer.val_before_train=False",
        "trainer.total_training_steps=5",
        "trainer.test_freq=4",
        "trainer.save_freq=3",
        "trainer.logger=[file]",
        f"{ARR}.actor.fsdp_config.model_dtype=fp32",
        f"{ARR}.rollout.dtype=fp32",
        f"{ARR}.actor.checkpoint.save_contents=[model,optimizer,extra]",
    )
    trainer = start_trainer(cfg, load_inputs(cfg))
    trainer.prefetch_rollouts = prefetch
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    with open(os.path.join(tmp_path, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return trainer.num_prefetched_rollouts, rows


def _stable(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(NONDETERMINISTIC)}


def test_queued_rollouts_train_exactly_as_separate_calls(tmp_path, ray_local):
    queued, early = _train(tmp_path / "early", ray_local, prefetch=True)
    separate, plain = _train(tmp_path / "plain", ray_local, prefetch=False)
    assert (queued, separate) == (2, 0), "steps 1 and 2 queue the next rollout; 3 saves, 4 and 5 validate"
    assert [r["step"] for r in early] == [1, 2, 3, 4, 5]
    assert [_stable(r) for r in early] == [_stable(r) for r in plain]
    assert any(r["actor/grad_norm"] > 0 for r in early), "a trivially empty update would also match"
    assert "val-core/verl_lite/arith/reward/mean@1" in early[-1]
    for rank in range(2):  # the checkpoint after step 3 holds the rollout's state after step 3
        name = f"global_step_3/actor/extra_state_world_size_2_rank_{rank}.pt"
        a, b = (torch.load(tmp_path / run / name, weights_only=True) for run in ("early", "plain"))
        assert a["worker"] == b["worker"] and a["worker"]["rollout"]["num_calls"] == 3
