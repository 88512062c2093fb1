"""verl 0.9's colocate_async through the real CLI (HF rollout, two CPU workers, Ray), one run that is
SIGKILLed after its step-2 checkpoint and resumed: it resumes from the checkpoint (finished groups
restored, the others re-issued from their prompts) and finishes; over its four steps partial
rollouts carry over steps with verl's staleness metrics, and `drop` evicts the groups past
max_off_policy_threshold and trains none of them. verl_lite/trainer/colocate_async.py says how."""

from __future__ import annotations

import os

import pytest

from tests.trainer.test_resume import _cmd, _run, _training_rows, killed_after_checkpoint
from verl_lite.trainer import checkpoint as ckpt

pytestmark = pytest.mark.slow

# two batches in flight beyond the step's own and a threshold of 2: groups wait, some past the threshold
ASYNC = [
    "trainer.use_v1=True",
    "trainer.v1.trainer_mode=colocate_async",
    "trainer.v1.colocate_async.num_warmup_batches=2",
    "trainer.v1.sampler.max_off_policy_threshold=2",
    "trainer.test_freq=-1",
]
OFF_POLICY = [
    f"training/off_policy/{name}/{stat}"
    for name in ("trajectory_spans", "trajectory_staleness", "trajectory_staleness_worst")
    for stat in ("mean", "max", "min")
]


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    """(its folder, the step it was killed after, the buffer its checkpoint held, the resumed run's output)."""
    root = tmp_path_factory.mktemp("colocate")
    out = str(root / "run")
    cmd = _cmd(out, *ASYNC, "trainer.save_freq=1")
    killed_at = killed_after_checkpoint(out, cmd, root / "killed.log")
    saved = ckpt.read_trainer_state(ckpt.step_dir(out, killed_at))["driver"]["replay_buffer"]
    in_flight = _training_rows(out)[killed_at]["colocate_async/groups_in_flight"]
    proc = _run(out, *ASYNC, "trainer.save_freq=1")
    return out, killed_at, saved, in_flight, proc.stdout + proc.stderr


def test_partial_rollouts_carry_over_steps_within_the_staleness_bound(killed_and_resumed):
    rows = _training_rows(killed_and_resumed[0])
    assert sorted(rows) == [1, 2, 3, 4]
    for step, row in rows.items():
        assert set(OFF_POLICY) <= set(row), step
        assert row["colocate_async/rounds"] >= 0  # 0: enough groups finished in earlier steps' rounds
        # the weights of step s are version s - 1, and `drop` trains no group submitted before step
        # s - 1 (its age s - submitted + 1 would pass the threshold of 2): no token older than version s - 2
        assert 0 <= row["training/off_policy/trajectory_staleness/min"]
        assert row["training/off_policy/trajectory_staleness_worst/max"] <= 1
        assert (
            row["training/off_policy/trajectory_staleness_worst/min"]
            >= row["training/off_policy/trajectory_staleness/min"]
        )
    assert rows[1]["training/off_policy/trajectory_spans/max"] == 1  # one version exists at step 1
    # the warm-up batches run ahead: later steps train on responses begun before the last update
    assert max(rows[s]["training/off_policy/trajectory_spans/max"] for s in (2, 3, 4)) >= 2
    assert max(rows[s]["colocate_async/partial_trajectories"] for s in (1, 2, 3)) > 0
    # groups left waiting past the threshold were evicted (and refilled: the batch stays whole)
    assert sum(row.get("training/off_policy/evicted_samples", 0) for row in rows.values()) > 0
    # every sync is checked (a step that needed no round syncs nothing: the next round does)
    synced = [row for row in rows.values() if "perf/weight_sync_unverified_params" in row]
    assert synced and all(row["perf/weight_sync_unverified_params"] == 0 for row in synced)


def test_a_sigkilled_async_run_resumes_from_its_checkpoint_and_finishes(killed_and_resumed):
    out, killed_at, saved, in_flight, output = killed_and_resumed
    assert len(saved["buffer"]["groups"]) == in_flight > 0  # every group in flight was saved
    assert f"resumed from {ckpt.step_dir(os.path.abspath(out), killed_at)}" in output
    rows = _training_rows(out)
    assert sorted(rows) == [1, 2, 3, 4] and ckpt.latest_step(out) == 4
    assert all(set(OFF_POLICY) <= set(rows[s]) for s in range(killed_at + 1, 5))
