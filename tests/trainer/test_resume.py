"""Exact resume through the real CLI: a resumed run reproduces an uninterrupted one step for step.

Every run here is PPO with a critic and the adaptive KL penalty in the reward, so a checkpoint
carries the actor's and the critic's shards and the KL coefficient. The reference trains 4 steps
and checkpoints every 2 (with the actor's HF export). A run stopped after step 2 (its last, so it
saves) is resumed from that checkpoint (resume_mode=resume_path) into another folder; another run,
checkpointing every step, is SIGKILLed, driver process group and all, once it has checkpointed step
2 or later, and is restarted with resume_mode=auto (a mid-run checkpoint). Every training metric of
the resumed steps must equal the reference's (timing, throughput and memory figures aside). The
model merger turns the reference's last checkpoint into a HF folder holding the trainer's HF
export's weights, in bf16 as verl's merger writes them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.helpers import shared_ray
from tests.helpers.merged import assert_bf16_of
from tests.test_main_ppo import NONDETERMINISTIC, SMALL
from verl_lite.trainer import checkpoint as ckpt

pytestmark = pytest.mark.slow

FOUR_STEPS = [o for o in SMALL if not o.startswith("trainer.total_training_steps")] + [
    "trainer.total_training_steps=4"
]
# the runs of this file: what a checkpoint must bring back is the most here (the critic's shards, the
# adaptive KL coefficient); validation is off (nothing here reads it)
PPO_CRITIC = [
    "algorithm.adv_estimator=gae",
    "algorithm.use_kl_in_reward=True",
    "algorithm.kl_ctrl.type=adaptive",
    "algorithm.kl_ctrl.target_kl=0.1",
    "algorithm.kl_ctrl.horizon=100",
    "trainer.val_before_train=False",
    "trainer.test_freq=-1",
]
BOTH = {"actor": ["model", "optimizer", "extra"], "critic": ["model", "optimizer", "extra"]}


def _cmd(out, *overrides, address="local"):
    given = {o.split("=")[0] for o in overrides}
    return [
        sys.executable,
        "-m",
        "verl_lite.main_ppo",
        "--config-name=demo",
        f"hydra.run.dir={out}",
        f"trainer.default_local_dir={out}",
        # a Ray of its own (a killed run's Ray ends with it), or the tests' shared one (_run): without
        # an address, ray.init() joins any cluster `ray start` left running here
        f"ray_kwargs.ray_init.address={address}",
        *[o for o in FOUR_STEPS if o.split("=")[0] not in given],
        *overrides,
    ]


def _run(out, *overrides):
    # a run that is not killed joins the tests' shared cluster (tests/helpers/shared_ray.py)
    env = shared_ray.joined_env(dict(os.environ, RAY_DEDUP_LOGS="0"))
    cmd = _cmd(out, *overrides, address=env["RAY_ADDRESS"])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _ppo(out, *overrides):
    return _run(out, *PPO_CRITIC, *overrides)


def _training_rows(out) -> dict[int, dict]:
    """The last logged training row of each step (a step re-run after a kill is logged twice)."""
    rows = {}
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if "actor/pg_loss" in row:
                rows[row["step"]] = {k: v for k, v in row.items() if not k.startswith(NONDETERMINISTIC)}
    return rows


def _assert_same_steps(reference, resumed, steps):
    for step in steps:
        want, got = reference[step], resumed[step]
        assert set(want) == set(got), set(want) ^ set(got)
        diff = {k: (want[k], got[k]) for k in want if abs(want[k] - got[k]) > 1e-6}
        assert not diff, f"step {step}: {diff}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("resume") / "reference")
    _ppo(
        out,
        "trainer.save_freq=2",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
    )
    return out


def test_reference_run_writes_complete_checkpoints(reference):
    assert ckpt.saved_steps(reference) == [2, 4] and ckpt.latest_step(reference) == 4
    for step in (2, 4):
        ckpt.check_complete(ckpt.step_dir(reference, step), BOTH, 2, "t")
    assert not [n for n in os.listdir(reference) if n.startswith((".tmp", ".trash"))]
    rows = _training_rows(reference)
    assert sorted(rows) == [1, 2, 3, 4]
    # the steps a resumed run repeats (3, 4) must carry a gradient, or their equality shows nothing
    assert max(rows[s]["actor/grad_norm"] for s in (3, 4)) > 0, [rows[s]["actor/grad_norm"] for s in rows]
    assert rows[3]["critic/vf_loss"] > 0 and rows[3]["critic/grad_norm"] > 0
    coef = [rows[s]["actor/reward_kl_penalty_coeff"] for s in (1, 3)]
    assert coef[0] != coef[1], "the adaptive coefficient must move, or restoring it proves nothing"


def test_a_stopped_run_resumed_from_its_path_reproduces_the_reference(reference, tmp_path):
    stopped = str(tmp_path / "stopped")
    _ppo(stopped, "trainer.total_training_steps=2", "trainer.save_freq=3")  # saved only as the last step
    assert ckpt.saved_steps(stopped) == [2]
    ckpt.check_complete(ckpt.step_dir(stopped, 2), BOTH, 2, "t")
    out, path = str(tmp_path / "resumed"), ckpt.step_dir(stopped, 2)
    proc = _ppo(out, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={path}")
    assert f"resumed from {path} at step 2" in proc.stdout + proc.stderr
    rows = _training_rows(out)
    assert sorted(rows) == [3, 4], "a resumed run starts after the checkpoint's step"
    reference_rows = _training_rows(reference)
    _assert_same_steps(reference_rows, _training_rows(stopped), [1, 2])
    _assert_same_steps(reference_rows, rows, [3, 4])


def _wait_for_checkpoint(out, proc, step, timeout=300):
    start = time.time()
    while time.time() - start < timeout:
        if proc.poll() is not None:
            pytest.fail(f"the run ended (status {proc.returncode}) before checkpointing step {step}")
        try:
            if (ckpt.latest_step(out) or 0) >= step:
                return
        except ValueError:  # caught between write and rename: never, the tracker is replaced atomically
            raise
        time.sleep(0.2)
    pytest.fail(f"no checkpoint of step {step} within {timeout}s")


def killed_after_checkpoint(out, cmd, log_path, step: int = 2) -> int:
    """Run `cmd` in a session of its own and SIGKILL it, driver process group and all, once it has
    checkpointed `step` or later; the latest step it saved."""
    with open(log_path, "w") as log:
        env = dict(os.environ, RAY_DEDUP_LOGS="0")
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env, start_new_session=True)
        try:
            _wait_for_checkpoint(out, proc, step)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return ckpt.latest_step(out)


def test_sigkilled_run_resumes_exactly_and_keeps_only_the_newest(reference, tmp_path):
    out = str(tmp_path / "killed")
    keep = ["trainer.save_freq=1", "trainer.max_actor_ckpt_to_keep=2", "trainer.max_critic_ckpt_to_keep=2"]
    killed_at = killed_after_checkpoint(out, _cmd(out, *PPO_CRITIC, *keep), tmp_path / "killed.log")
    for step in ckpt.saved_steps(out):  # whatever the kill interrupted, every named checkpoint is whole
        ckpt.check_complete(ckpt.step_dir(out, step), BOTH, 2, "t")
    before = ckpt.saved_steps(out)
    proc = _ppo(out, *keep)  # resume_mode=auto is the default
    assert f"resumed from {ckpt.step_dir(os.path.abspath(out), killed_at)}" in proc.stdout + proc.stderr
    resumed = _training_rows(out)
    _assert_same_steps(_training_rows(reference), resumed, range(killed_at + 1, 5))
    # as verl: the resumed run rotates the checkpoints it saved (the newest 2), not the killed run's
    assert ckpt.saved_steps(out) == sorted({*before, *[s for s in (3, 4) if s > killed_at]})
    assert ckpt.latest_step(out) == 4
    assert not [n for n in os.listdir(out) if n.startswith((".tmp", ".trash"))]


def test_model_merger_cli_matches_the_hf_export(reference, tmp_path):
    actor = os.path.join(ckpt.step_dir(reference, 4), "actor")
    target = str(tmp_path / "merged")
    cmd = [sys.executable, "-m", "verl_lite.model_merger", "merge", "--backend", "fsdp"]
    proc = subprocess.run(
        [*cmd, "--local_dir", actor, "--target_dir", target], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_bf16_of(target, f"{actor}/huggingface")  # verl's merger writes bf16: each the export's weight
    ids = torch.randint(3, 100, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        export = AutoModelForCausalLM.from_pretrained(f"{actor}/huggingface")(input_ids=ids).logits
        initial = AutoModelForCausalLM.from_pretrained(f"{ckpt.step_dir(reference, 2)}/actor/huggingface")(
            input_ids=ids
        ).logits
    assert (export - initial).abs().max() > 1e-4, "steps 3-4 must have changed the weights"
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl_lite.model_merger",
            "--local_dir",
            str(tmp_path),
            "--target_dir",
            target,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "--local_dir" in bad.stderr
