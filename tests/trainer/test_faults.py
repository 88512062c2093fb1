"""A worker that dies mid-step or mid-save: the run stops naming worker, rank and trainer phase, and
the last committed checkpoint stays whole and resumable.

The trainer runs in this process on a real Ray with 2 FSDP2 workers and checkpoints every step.
At step 2 one worker's process is SIGKILLed right as a phase starts: in `update_actor`, and in
`save_checkpoint` (where its partner is then left mid-write). The checkpoint of step 1 must still
be the latest, complete, and give the same weights through the model merger as its HF export.
"""

from __future__ import annotations

import os
import signal

import pytest
import ray
import torch
from safetensors.torch import load_file

from tests.test_main_ppo import SMALL
from verl_lite.config.compose import load_config
from verl_lite.main_ppo import load_inputs, start_trainer
from verl_lite.model_merger import merge
from verl_lite.single_controller import WorkerError
from verl_lite.trainer import checkpoint as ckpt
from verl_lite.utils.logs import LOG_DIR_ENV

pytestmark = pytest.mark.slow
CONTENTS = ["model", "optimizer", "extra"]


def _trainer(out: str):
    overrides = [
        *SMALL,
        f"trainer.default_local_dir={out}",
        "trainer.save_freq=1",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.logger=[file]",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
    ]
    cfg = load_config(overrides, "demo")
    return start_trainer(cfg, load_inputs(cfg))


def _kill_rank_1_at_step_2(trainer, fn):
    """`fn`, except that at step 2 the process of worker rank 1 is SIGKILLed first."""
    worker = trainer.actor_rollout_wg.workers[1]
    pid = ray.get(worker.__ray_call__.remote(lambda self: os.getpid()))

    def wrapped(*args, **kwargs):
        if trainer.global_steps == 2:
            os.kill(pid, signal.SIGKILL)
        return fn(*args, **kwargs)

    return wrapped


def _assert_step_1_is_intact(out: str, tmp_path) -> None:
    assert ckpt.latest_step(out) == 1 and ckpt.saved_steps(out) == [1]
    step1 = ckpt.step_dir(out, 1)
    ckpt.check_complete(step1, {"actor": CONTENTS}, 2, "test")
    merged = merge(os.path.join(step1, "actor"), str(tmp_path / "merged"))
    export = load_file(os.path.join(step1, "actor", "huggingface", "model.safetensors"))
    for name, tensor in load_file(os.path.join(merged, "model.safetensors")).items():
        # the merger writes verl's bf16: the sharded weights of step 1 are the ones its HF export holds
        assert torch.equal(tensor, export[name].to(tensor.dtype)), name


def test_worker_killed_in_update_actor_names_worker_rank_and_phase(ray_local, tmp_path, monkeypatch):
    out = str(tmp_path / "run")
    monkeypatch.setenv(LOG_DIR_ENV, str(tmp_path / "logs"))  # as main_ppo does: workers log to files
    trainer = _trainer(out)
    try:
        trainer.phases = [
            (n, _kill_rank_1_at_step_2(trainer, p) if n == "update_actor" else p) for n, p in trainer.phases
        ]
        with pytest.raises(WorkerError) as info:
            trainer.fit()
    finally:
        trainer.shutdown()
    message = str(info.value)
    assert "trainer phase 'update_actor' at step 2" in message, message
    assert "actor_rollout_ref rank 1 died during update_actor" in message, message
    log = tmp_path / "logs" / "actor_rollout_ref_rank1.log"
    assert f"actor_rollout_ref rank 1 log: {log}" in message and log.exists(), message
    _assert_step_1_is_intact(out, tmp_path)


def test_worker_killed_mid_save_leaves_the_previous_checkpoint_and_resume_works(ray_local, tmp_path):
    out = str(tmp_path / "run")
    trainer = _trainer(out)
    try:
        wg = trainer.actor_rollout_wg
        wg.save_checkpoint = _kill_rank_1_at_step_2(trainer, wg.save_checkpoint)
        with pytest.raises(WorkerError, match=r"trainer phase 'save_checkpoint' at step 2 failed: .*rank 1"):
            trainer.fit()
    finally:
        trainer.shutdown()
    # the failed save is discarded: no partial folder is left for a later run to trip on (issue 38)
    assert not os.path.exists(os.path.join(out, ".tmp_global_step_2")), os.listdir(out)
    _assert_step_1_is_intact(out, tmp_path)

    resumed = _trainer(out)  # resume_mode=auto: from step 1, the newest complete checkpoint
    try:
        assert resumed.resume_path == ckpt.step_dir(os.path.abspath(out), 1)
        resumed.fit()
    finally:
        resumed.shutdown()
    assert ckpt.latest_step(out) == 2 and ckpt.saved_steps(out) == [1, 2]
    assert not os.path.exists(os.path.join(out, ".tmp_global_step_2"))
