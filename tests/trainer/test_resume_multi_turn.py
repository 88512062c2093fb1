"""Multi-turn runs reproduce and resume exactly, through the real CLI (conf/tool_demo.yaml with the
HF rollout): the agent loop, the calculator tool in its threads, two CPU workers.

Two runs only. The reference trains 3 steps uninterrupted. The repeat, same seed, checkpoints every
step, is SIGKILLed (driver process group and all) once it has checkpointed step 2 and restarted
with resume_mode=auto. Its steps before the kill must equal the reference's (two identical runs
give identical metrics: they did not when a turn's requests reached the engine in the order tool
threads finished, agent_loop/scheduler.py), and the steps after the resume too (a killed and
resumed multi-turn run continues as the uninterrupted one).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import shared_ray
from tests.trainer.test_resume import _training_rows, killed_after_checkpoint
from verl_lite.trainer import checkpoint as ckpt

pytestmark = pytest.mark.slow

TOOL_DEMO = [
    "actor_rollout_ref.rollout.name=hf",
    "data.train_batch_size=4",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "trainer.total_training_steps=3",
    "trainer.val_before_train=False",
    "trainer.test_freq=-1",
]
# seconds per tool call: they measure the machine (timing_s/agent_loop/* is left out with timing_s/)
TIMINGS = ("agent_loop/tool_latency_s/",)


def _cmd(out, *overrides, address="local"):
    return [
        sys.executable,
        "-m",
        "verl_lite.main_ppo",
        "--config-name=tool_demo",
        f"hydra.run.dir={out}",
        f"trainer.default_local_dir={out}",
        f"ray_kwargs.ray_init.address={address}",  # as test_resume.py's runs
        *TOOL_DEMO,
        *overrides,
    ]


def _run(out, *overrides):
    # a run that is not killed joins the tests' shared cluster (tests/helpers/shared_ray.py)
    env = shared_ray.joined_env(dict(os.environ, RAY_DEDUP_LOGS="0"))
    cmd = _cmd(out, *overrides, address=env["RAY_ADDRESS"])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _assert_same_steps(reference, got, steps):
    """Bit for bit: every metric of each step equal to the reference's, not merely close."""
    for step in steps:
        want, have = reference[step], got[step]
        assert set(want) == set(have), set(want) ^ set(have)
        diff = {k: (want[k], have[k]) for k in want if want[k] != have[k]}
        assert not diff, f"step {step}: {diff}"


def _rows(out) -> dict[int, dict]:
    return {
        step: {k: v for k, v in row.items() if not k.startswith(TIMINGS)}
        for step, row in _training_rows(out).items()
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tool_demo_assets):
    out = str(tmp_path_factory.mktemp("tool_resume") / "reference")
    _run(out)
    return out


def test_tool_demo_reference_calls_tools_and_learns(reference):
    rows = _rows(reference)
    assert sorted(rows) == [1, 2, 3]
    for row in rows.values():  # multi-turn for real: the calculator was called and its turns masked
        assert row["num_turns/max"] >= 4 and row["tool_call_counts/mean"] > 0, row
        assert row["agent_loop/num_tool_timeouts"] == 0, row
    # the steps compared after the resume must carry a gradient, or their equality shows nothing
    assert rows[3]["actor/grad_norm"] > 0, rows[3]["actor/grad_norm"]


def test_tool_demo_repeated_killed_and_resumed_matches_the_reference(reference, tmp_path):
    out = str(tmp_path / "killed")
    killed_at = killed_after_checkpoint(out, _cmd(out, "trainer.save_freq=1"), tmp_path / "killed.log")
    before = _rows(out)
    assert killed_at == 2, f"killed after checkpointing step {killed_at}: no step left to resume"
    assert set(range(1, killed_at + 1)) <= set(before)
    reference_rows = _rows(reference)
    # same seed, same metrics: step 2 is the first step sampled after tool turns of a trained policy
    _assert_same_steps(reference_rows, before, range(1, killed_at + 1))
    proc = _run(out, "trainer.save_freq=1")  # resume_mode=auto is the default
    assert f"resumed from {ckpt.step_dir(os.path.abspath(out), killed_at)}" in proc.stdout + proc.stderr
    after = _rows(out)
    assert sorted(after) == [1, 2, 3]
    _assert_same_steps(reference_rows, after, [1, 2, 3])
