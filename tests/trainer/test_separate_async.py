"""verl 0.9's separate_async through the real CLI (Ray, one trainer worker and a rollout group of one
HF rollout worker, each on a CPU of its own), one run SIGKILLed after its step-2 checkpoint and
resumed: the rollout group generates while the trainer trains, every step's weights reach it and are
checked where they landed, the batch trains on responses begun under older weights within the
staleness bound, the resumed run sends its restored weights to the group before generating, and
validation generates on the group (verl_lite/trainer/separate_async.py says how)."""

from __future__ import annotations

import os

import pytest

from tests.trainer.test_colocate_async import OFF_POLICY
from tests.trainer.test_resume import _cmd, _run, _training_rows, killed_after_checkpoint
from verl_lite.trainer import checkpoint as ckpt

pytestmark = pytest.mark.slow

# 8 prompts a step = 2 local updates of 4 (verl's invariant); a warm-up batch runs ahead
SEPARATE = [
    "trainer.use_v1=True",
    "trainer.v1.trainer_mode=separate_async",
    "trainer.v1.separate_async.num_warmup_batches=1",
    "trainer.v1.separate_async.parameter_sync_step=2",
    "trainer.v1.sampler.max_off_policy_threshold=2",
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",  # verl's script: the transport is Ray's here
    "actor_rollout_ref.actor.optim.lr_warmup_steps=8",  # the schedule moves with every local update
    "trainer.n_gpus_per_node=1",
    "trainer.total_training_steps=3",
    "trainer.test_freq=3",  # validation generates on the rollout group (the trainer holds no rollout)
    "data.val_max_samples=32",
    "trainer.save_freq=1",
]


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    root = tmp_path_factory.mktemp("separate")
    out = str(root / "run")
    killed_at = killed_after_checkpoint(out, _cmd(out, *SEPARATE), root / "killed.log")
    saved = ckpt.read_trainer_state(ckpt.step_dir(out, killed_at))["driver"]["replay_buffer"]
    in_flight = _training_rows(out)[killed_at]["separate_async/groups_in_flight"]
    proc = _run(out, *SEPARATE)
    return out, killed_at, (saved, in_flight), proc.stdout + proc.stderr


def test_the_rollout_group_generates_ahead_and_every_sync_is_checked(killed_and_resumed):
    rows = _training_rows(killed_and_resumed[0])
    assert sorted(rows) == [1, 2, 3]
    for step, row in rows.items():
        assert set(OFF_POLICY) <= set(row), step
        # the step's weights reached the group and were read back there: every parameter checked
        assert row["perf/weight_sync_verified_params"] > 10 and row["perf/weight_sync_unverified_params"] == 0
        assert row["separate_async/load_weights_gb"] > 0 and row["separate_async/weight_sync_s"] > 0
        assert row["training/off_policy/trajectory_staleness_worst/max"] <= 1  # the threshold of 2
    assert rows[1]["training/off_policy/trajectory_staleness/max"] == 0  # one version exists at step 1
    # the warm-up batch's groups were begun under the first weights and trained at step 2
    assert rows[2]["training/off_policy/trajectory_staleness_worst/max"] == 1
    # two local updates a step, each one step of the 8-step warm-up (the sync trainer: one a step);
    # actor/lr is the step's last update's, as verl reports it: 2s / 8 of 1e-4
    lrs = [rows[s]["actor/lr"] for s in (1, 2, 3)]
    assert lrs == pytest.approx([1e-4 * 2 * s / 8 for s in (1, 2, 3)], rel=1e-9)


def test_a_sigkilled_separate_async_run_resumes_and_syncs_its_restored_weights(killed_and_resumed):
    out, killed_at, (saved, in_flight), output = killed_and_resumed
    assert len(saved["buffer"]["groups"]) == in_flight > 0  # every group in flight was saved
    assert f"resumed from {ckpt.step_dir(os.path.abspath(out), killed_at)}" in output
    assert "rollout group ready: 1 x hf rollout (separate_async)" in output
    # the restored weights reached the group before it generated: every one of them checked
    assert f"the rollout group holds the trainer's weights of step {killed_at} (" in output
    assert "parameters verified where they landed, 0 unverified)" in output
    assert ckpt.latest_step(out) == 3
    rows = _training_rows(out)
    assert 0 <= rows[3]["val-core/verl_lite/arith/reward/mean@1"] <= 1
