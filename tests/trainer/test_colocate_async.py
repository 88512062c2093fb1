"""verl 0.9's colocate_async through the real CLI (HF rollout, two CPU workers, Ray), one run of four
steps that checkpoints every step: partial rollouts carry over steps with verl's staleness metrics,
`drop` evicts the groups past max_off_policy_threshold and trains none of them, and every
checkpoint holds the groups in flight. A SIGKILLed async run resuming from such a checkpoint (the
buffer's state is the same class's, ColocateAsync.state_dict) is tests/trainer/test_separate_async.py's.
verl_lite/trainer/colocate_async.py says how."""

from __future__ import annotations

import pytest

from tests.trainer import test_resume_multi_turn as multi_turn
from tests.trainer.test_resume import _run, _training_rows
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
def run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("colocate") / "run")
    _run(out, *ASYNC, "trainer.save_freq=1")
    return out


def test_partial_rollouts_carry_over_steps_within_the_staleness_bound(run):
    rows = _training_rows(run)
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


def test_every_checkpoint_holds_the_groups_in_flight(run):
    rows = _training_rows(run)
    for step in ckpt.saved_steps(run):
        saved = ckpt.read_trainer_state(ckpt.step_dir(run, step))["driver"]["replay_buffer"]
        groups = saved["buffer"]["groups"]
        assert len(groups) == rows[step]["colocate_async/groups_in_flight"] > 0, step
        # finished groups whole, the others as prompts only (regenerated from their start on resume)
        assert all(g["trajectories"] is None or len(g["trajectories"]) == 4 for g in groups)


@pytest.fixture(scope="module")
def multi_turn_run(tmp_path_factory, tool_demo_assets):
    """The tool demo's agent loop (two HF workers) under colocate_async: 3 steps, two warm-up batches."""
    out = str(tmp_path_factory.mktemp("colocate_multi_turn") / "run")
    overrides = [o for o in ASYNC if "num_warmup_batches" not in o]
    multi_turn._run(
        out,
        *overrides,
        "trainer.total_training_steps=3",
        "trainer.save_freq=3",
        # pairs of samples, three batches ahead: a group whose answers need no tool finishes rounds
        # before one that calls it, so the first batch is ready while tool calls are half generated
        "trainer.v1.colocate_async.num_warmup_batches=3",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    )
    return out


def test_multi_turn_trajectories_carry_over_steps_in_rounds(multi_turn_run):
    """The ranks keep their agent loops between rounds (agent_loop/rounds.py): a trajectory cut off
    by a step continues on the next step's weights, tool turns and all, within the staleness bound."""
    rows = _training_rows(multi_turn_run)
    assert sorted(rows) == [1, 2, 3]
    for step, row in rows.items():
        assert set(OFF_POLICY) <= set(row), step
        assert row["training/off_policy/trajectory_staleness_worst/max"] <= 1  # the threshold of 2
    # the first batch: groups that answered without the tool, while the others' calls were cut off;
    # those finished their calls, tool turns and answers under step 2's weights
    assert rows[1]["colocate_async/rounds"] < rows[2]["colocate_async/rounds"]
    assert rows[1]["colocate_async/partial_trajectories"] > 0
    assert rows[2]["num_turns/max"] >= 4 and rows[2]["tool_call_counts/mean"] > 0
    assert rows[2]["agent_loop/masked_response_token_ratio"] > 0  # the tool's turns
    assert rows[2]["training/off_policy/trajectory_spans/max"] == 2
    saved = ckpt.read_trainer_state(ckpt.step_dir(multi_turn_run, 3))["driver"]["replay_buffer"]
    finished = [t for g in saved["buffer"]["groups"] for t in g["trajectories"] or []]
    assert all(len(t["result"][0]["response_ids"]) > 0 for t in finished)
