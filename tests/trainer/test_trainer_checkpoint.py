"""TrainerCheckpoint on real folders: what rotation may delete, and what a resume leaves on disk.

Rotation follows verl 0.9 (its checkpoint manager removes only the paths it saved itself): a run
rotates its own saves and never a folder it did not write, such as the later steps a rollback
(resume_from_path to an older step, or resume_mode=disable in a used folder) leaves behind, or a
step folder holding only another role. trainer.del_local_ckpt_after_load deletes, in verl, only the
local copy of a remote checkpoint; a local one is kept.

The role folders are stand-ins (the files the completeness check looks for), written by a plain
object in place of a worker group; engine state is covered by tests/engine/test_checkpoint*.py.
"""

from __future__ import annotations

import logging
import os

from tests.trainer.test_checkpoint import _save, _write_role
from tests.trainer.test_extensions import load
from verl_lite.data.rlhf_dataset import EpochSampler
from verl_lite.trainer import checkpoint as ckpt
from verl_lite.trainer.trainer_checkpoint import TrainerCheckpoint


class _RoleWriter:
    """Writes a role's stand-in files where a worker group would write its engine state."""

    def __init__(self, role: str):
        self.role = role

    def save_checkpoint(self, path: str, step: int) -> None:
        _write_role(os.path.dirname(path), self.role)


class _Replay:
    """An async mode's replay buffer, as the checkpoint stores it."""

    def state_dict(self) -> dict:
        return {"buffer": {"groups": [{"prompt": 1}, {"prompt": 2}]}}


def _save_steps(tc, steps, replay=None):
    sampler = EpochSampler(16, 4, shuffle=False, seed=None)
    for step in steps:
        tc.save(step, {"actor": _RoleWriter("actor")}, sampler, None, replay)
        tc.wait()


def test_a_rolled_back_run_rotates_only_its_own_saves(tmp_path):
    """global_step_90 and _100 of an earlier run (and a critic-only step) are on disk; this run saves
    60, 70, 80 keeping 2: before, committing 60 ranked it behind 90 and 100 and deleted it (the
    tracker then named a missing folder), and the critic-only folder went whole."""
    root = str(tmp_path)
    for step in (90, 100):
        _save(root, step)
    _save(root, 5, roles=("critic",))  # an earlier PPO run's: no actor in it
    tc = TrainerCheckpoint(load(tmp_path, "trainer.max_actor_ckpt_to_keep=2"), False, 2)
    _save_steps(tc, [60])
    assert ckpt.saved_steps(root) == [5, 60, 90, 100] and ckpt.latest_step(root) == 60
    ckpt.check_complete(ckpt.step_dir(root, 60), {"actor": ["model", "optimizer", "extra"]}, 2, "k")
    _save_steps(tc, [70, 80])
    assert ckpt.saved_steps(root) == [5, 70, 80, 90, 100] and ckpt.latest_step(root) == 80
    tc.finish()


def test_rotate_never_removes_a_step_it_was_not_given(tmp_path):
    root = str(tmp_path)
    for step in (1, 2, 3):
        _save(root, step)
    ckpt.rotate(root, {"actor": 1}, [2])  # the run saved only step 2 (just committed)
    assert ckpt.saved_steps(root) == [1, 2, 3]


def test_resume_keeps_a_local_checkpoint_with_del_local_ckpt_after_load(tmp_path, caplog):
    """verl deletes only the local copy of a remote (HDFS) checkpoint; the folder resumed from and
    the tracker stay, so a crash before the next save resumes from it again. A replay buffer the
    sync trainer does not use is a warning naming trainer.v1.trainer_mode."""
    root = str(tmp_path)
    cfg = load(tmp_path, "trainer.del_local_ckpt_after_load=True")
    _save_steps(TrainerCheckpoint(cfg, False, 2), [3], replay=_Replay())
    tc = TrainerCheckpoint(cfg, False, 2)
    tc.resume_path = ckpt.step_dir(root, 3)  # what find_resume_path gives (it vets real engine files)
    sampler = EpochSampler(16, 4, shuffle=False, seed=None)
    with caplog.at_level(logging.WARNING, logger="verl_lite.trainer.trainer_checkpoint"):
        assert tc.load({}, sampler, None) == 3
    assert os.path.isdir(ckpt.step_dir(root, 3)) and ckpt.latest_step(root) == 3
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(m.startswith("trainer.del_local_ckpt_after_load=True: kept ") for m in said), said
    assert any("2 prompt groups in flight" in m and "trainer.v1.trainer_mode=sync" in m for m in said), said
