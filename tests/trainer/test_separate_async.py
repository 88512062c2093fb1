"""verl 0.9's separate_async through the real CLI (Ray, one trainer worker and a rollout group of one
HF rollout worker, each on a CPU of its own), on the tool demo's multi-turn agent loop: one run
SIGKILLed after its step-2 checkpoint and resumed. The rollout group runs the agent loops in rounds
while the trainer trains (agent_loop/rounds.py), every step's weights reach the group and are
checked where they landed, the batch trains within the staleness bound, the checkpoint keeps the
finished trajectories' loop outputs, the resumed run sends its restored weights to the group before
generating, and multi-turn validation generates on the group (verl_lite/trainer/separate_async.py
says how). The single-turn rounds are tests/trainer/test_colocate_async.py's."""

from __future__ import annotations

import json
import os

import pytest

from tests.trainer.test_colocate_async import OFF_POLICY
from tests.trainer.test_resume import _training_rows, killed_after_checkpoint
from tests.trainer.test_resume_multi_turn import _cmd, _run
from verl_lite.trainer import checkpoint as ckpt

pytestmark = pytest.mark.slow

# 4 prompts a step = 2 local updates of 2 (verl's invariant); a warm-up batch runs ahead
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
    "trainer.test_freq=3",  # validation generates on the rollout group (the trainer holds no rollout)
    "data.val_max_samples=16",
    "trainer.save_freq=1",
    # DAPO: finished groups whose rewards are all equal are evicted and refilled as they finish
    "algorithm.filter_groups.enable=True",
]


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory, tool_demo_assets):
    root = tmp_path_factory.mktemp("separate")
    out = str(root / "run")
    dumps = f"trainer.rollout_data_dir={root / 'rollouts'}"  # each step's trained responses and scores
    killed_at = killed_after_checkpoint(out, _cmd(out, *SEPARATE, dumps), root / "killed.log")
    saved = ckpt.read_trainer_state(ckpt.step_dir(out, killed_at))["driver"]["replay_buffer"]
    in_flight = _training_rows(out)[killed_at]["separate_async/groups_in_flight"]
    proc = _run(out, *SEPARATE, dumps)
    return out, killed_at, (saved, in_flight), proc.stdout + proc.stderr, root / "rollouts"


def test_the_rollout_group_generates_ahead_and_every_sync_is_checked(killed_and_resumed):
    rows = _training_rows(killed_and_resumed[0])
    assert sorted(rows) == [1, 2, 3]
    for step, row in rows.items():
        assert set(OFF_POLICY) <= set(row), step
        # multi-turn for real: the calculator was called and its turns masked
        assert row["num_turns/max"] >= 4 and row["tool_call_counts/mean"] > 0, step
        assert row["agent_loop/masked_response_token_ratio"] > 0, step
        # the step's weights reached the group and were read back there: every parameter checked
        assert row["perf/weight_sync_verified_params"] > 10 and row["perf/weight_sync_unverified_params"] == 0
        assert row["separate_async/load_weights_gb"] > 0 and row["separate_async/weight_sync_s"] > 0
        assert row["training/off_policy/trajectory_staleness_worst/max"] <= 1  # the threshold of 2
    assert rows[1]["training/off_policy/trajectory_staleness/max"] == 0  # one version exists at step 1
    # the warm-up batch's groups were begun under the first weights and trained at step 2
    assert rows[2]["training/off_policy/trajectory_staleness_worst/max"] == 1
    # whether a sync lands in the middle of a trajectory depends on the two groups' timing here (the
    # colocate_async multi-turn test shows one that does, deterministically); at most two versions
    assert max(row["training/off_policy/trajectory_spans/max"] for row in rows.values()) <= 2
    # two local updates a step, each one step of the 8-step warm-up (the sync trainer: one a step);
    # actor/lr is the step's last update's, as verl reports it: 2s / 8 of the tool demo's 3e-4
    lrs = [rows[s]["actor/lr"] for s in (1, 2, 3)]
    assert lrs == pytest.approx([3e-4 * 2 * s / 8 for s in (1, 2, 3)], rel=1e-9)


def test_a_sigkilled_separate_async_run_resumes_and_syncs_its_restored_weights(killed_and_resumed):
    out, killed_at, (saved, in_flight), output, _ = killed_and_resumed
    assert len(saved["buffer"]["groups"]) == in_flight > 0  # every group in flight was saved
    # finished groups keep their loops' outputs (as plain data), the others their prompts
    for group in saved["buffer"]["groups"]:
        for trajectory in group["trajectories"] or []:
            loop_output, stats = trajectory["result"]
            assert len(loop_output["response_ids"]) == len(loop_output["response_mask"]) > 0
            assert "generate_seconds" in stats
    assert f"resumed from {ckpt.step_dir(os.path.abspath(out), killed_at)}" in output
    assert "rollout group ready: 1 x hf rollout (separate_async)" in output
    # the restored weights reached the group before it generated: every one of them checked
    assert f"the rollout group holds the trainer's weights of step {killed_at} (" in output
    assert "parameters verified where they landed, 0 unverified)" in output
    assert ckpt.latest_step(out) == 3
    rows = _training_rows(out)
    assert 0 <= rows[3]["val-core/verl_lite/arith_tool/reward/mean@1"] <= 1
    assert rows[3]["val-aux/num_turns/mean"] > 2  # the rollout group ran the validation's agent loops


def test_dapo_trains_only_groups_whose_rewards_differ(killed_and_resumed):
    """algorithm.filter_groups under separate_async (verl 0.9.1's async rule: evict k, refill k): the
    groups scored equal were evicted as they finished, and every trained group's 4 scores differ."""
    out, _, _, _, dumps = killed_and_resumed
    rows = _training_rows(out)
    assert all("training/filter_groups/evicted_samples" in row for row in rows.values())
    assert sum(row["training/filter_groups/evicted_samples"] for row in rows.values()) > 0
    for step in (1, 2, 3):
        with open(dumps / f"{step}.jsonl") as f:
            scores = [json.loads(line)["score"] for line in f]
        assert len(scores) == 16, step  # 4 groups of 4: the batch stays whole
        groups = [scores[i : i + 4] for i in range(0, 16, 4)]
        assert all(len(set(group)) > 1 for group in groups), (step, groups)
