"""The driver's side of checkpoints on real folders: commit, rotation, resume resolution, checks.

Engine state inside a checkpoint is covered by tests/engine/test_checkpoint.py and whole runs by
test_resume.py / test_faults.py; here each role folder is a stand-in with the files a check needs.
"""

from __future__ import annotations

import hashlib
import json
import os
from types import SimpleNamespace

import pytest

from tests.test_main_ppo import _fails_fast
from verl_lite.trainer import checkpoint as ckpt
from verl_lite.utils.manifest import MANIFEST

ACTOR = {"actor": ["model", "optimizer", "extra"]}


def _write_role(folder, role, world=2):
    for sub in ("model", "optimizer"):
        os.makedirs(os.path.join(folder, role, sub))
        open(os.path.join(folder, role, sub, ".metadata"), "w").close()
    for r in range(world):
        open(os.path.join(folder, role, f"extra_state_world_size_{world}_rank_{r}.pt"), "w").close()


def _save(root, step, roles=("actor",)):
    tmp = ckpt.begin(root, step)
    for role in roles:
        _write_role(tmp, role)
    ckpt.write_trainer_state(tmp, step, {"epoch": 0, "offset": 8 * step})
    return ckpt.commit(root, step, tmp)


def test_commit_publishes_a_complete_folder_then_the_tracker(tmp_path):
    root = str(tmp_path)
    os.makedirs(tmp_path / ".tmp_global_step_1" / "junk")  # a crashed save's leftovers
    path = _save(root, 1)
    assert path == ckpt.step_dir(root, 1) and ckpt.latest_step(root) == 1
    ckpt.check_complete(path, ACTOR, 2, "k")
    assert ckpt.read_trainer_state(path) == {
        "global_step": 1,
        "sampler": {"epoch": 0, "offset": 8},
        "driver": {},
    }
    assert sorted(os.listdir(root)) == ["global_step_1", "latest_checkpointed_iteration.txt"]
    _save(root, 1)  # the same step again (a run restarted with resume disabled) replaces it
    assert ckpt.saved_steps(root) == [1]


def test_partial_temp_folders_of_any_step_are_cleaned_never_through_a_link(tmp_path):
    """A save that failed (a full disk) leaves .tmp_global_step_N: discard removes it; the next save
    removes those of every step, not only its own, and follows no link."""
    root = str(tmp_path / "run")
    os.makedirs(os.path.join(root, ".tmp_global_step_3", "actor", "model"))  # a full disk at step 3
    os.makedirs(os.path.join(root, ".tmp_global_step_7"))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.txt").write_text("x")
    os.symlink(outside, os.path.join(root, ".tmp_global_step_9"))
    tmp = ckpt.begin(root, 4)
    assert sorted(os.listdir(root)) == [".tmp_global_step_4", ".tmp_global_step_9"]
    assert (outside / "keep.txt").exists()
    _write_role(tmp, "actor")
    ckpt.discard(tmp)  # the save of step 4 failed too
    assert sorted(os.listdir(root)) == [".tmp_global_step_9"]


def test_rotation_keeps_the_newest_per_role(tmp_path):
    root = str(tmp_path)
    for step in (1, 2, 3):
        _save(root, step, roles=("actor", "critic"))
    ckpt.rotate(root, {"actor": 2, "critic": None}, [1, 2, 3])
    assert ckpt.saved_steps(root) == [1, 2, 3]
    assert not os.path.exists(os.path.join(root, "global_step_1", "actor"))
    assert os.path.isdir(os.path.join(root, "global_step_1", "critic"))
    ckpt.rotate(root, {"actor": 1, "critic": 1}, [1, 2, 3])
    assert ckpt.saved_steps(root) == [3] and ckpt.latest_step(root) == 3
    assert not [n for n in os.listdir(root) if n.startswith(".")]


class _Killed(BaseException):
    pass


def test_a_run_killed_mid_rotation_leaves_only_whole_checkpoints(tmp_path, monkeypatch):
    """Rotation removes one folder at a time; a kill after any one removal leaves no global_step_N
    that names a checkpoint it no longer holds (a step losing its last role goes whole)."""
    for kill_after in (1, 2):
        root = str(tmp_path / f"run{kill_after}")
        os.makedirs(root)
        for step in (1, 2, 3, 4):
            _save(root, step, roles=("actor", "critic"))
        real, calls = ckpt._remove, []

        def dying(root_, path, real=real, calls=calls, kill_after=kill_after):
            real(root_, path)
            calls.append(path)
            if len(calls) == kill_after:
                raise _Killed

        monkeypatch.setattr(ckpt, "_remove", dying)
        with pytest.raises(_Killed):
            ckpt.rotate(root, {"actor": 2, "critic": 2}, [1, 2, 3, 4])
        monkeypatch.setattr(ckpt, "_remove", real)
        for step in ckpt.saved_steps(root):
            ckpt.check_complete(ckpt.step_dir(root, step), {"actor": ["model"], "critic": ["model"]}, 2, "t")
        # the next save clears what the killed deletion left aside
        ckpt.discard(ckpt.begin(root, 5))
        assert not [n for n in os.listdir(root) if n.startswith((".tmp", ".trash"))]


def _trainer_cfg(root, mode="auto", path=None):
    return SimpleNamespace(default_local_dir=root, resume_mode=mode, resume_from_path=path)


def test_resume_resolution_per_mode(tmp_path):
    root = str(tmp_path)
    assert ckpt.resolve_resume_path(_trainer_cfg(root)) is None  # auto, nothing saved: from scratch
    _save(root, 2)
    assert ckpt.resolve_resume_path(_trainer_cfg(root)) == ckpt.step_dir(os.path.abspath(root), 2)
    assert ckpt.resolve_resume_path(_trainer_cfg(root, "disable")) is None
    other = str(tmp_path / "global_step_7")
    assert ckpt.resolve_resume_path(_trainer_cfg(root, "resume_path", other)) == other
    with pytest.raises(ValueError, match="trainer.resume_mode=resume_path needs trainer.resume_from_path"):
        ckpt.resolve_resume_path(_trainer_cfg(root, "resume_path"))
    (tmp_path / ckpt.TRACKER).write_text("two")
    with pytest.raises(ValueError, match="holds 'two', not a step number"):
        ckpt.resolve_resume_path(_trainer_cfg(root))


def test_incomplete_or_mismatched_checkpoints_are_named(tmp_path):
    path = _save(str(tmp_path), 1)
    with pytest.raises(
        FileNotFoundError, match=r"trainer.resume_from_path: checkpoint folder .* does not exist"
    ):
        ckpt.check_complete(str(tmp_path / "nope"), ACTOR, 2, "trainer.resume_from_path")
    with pytest.raises(FileNotFoundError, match=r"missing \['actor/extra_state_world_size_4_rank_0.pt'"):
        ckpt.check_complete(path, ACTOR, 4, "trainer.resume_from_path")
    os.remove(os.path.join(path, "actor", "optimizer", ".metadata"))
    with pytest.raises(FileNotFoundError, match=r"incomplete .* missing \['actor/optimizer/.metadata'\]"):
        ckpt.check_complete(path, ACTOR, 2, "k")
    ckpt.check_complete(path, {"actor": ["model"]}, 2, "k")  # load_contents=[model] needs only the weights


def test_a_resume_that_would_load_no_weights_is_refused(tmp_path):
    """verl's save_contents=['hf_model'] saves HF exports only; resuming from such a checkpoint would
    continue at its step from the initial weights: refused, naming the role's load_contents."""
    assert ckpt.weightless_resume("/c/global_step_1", ACTOR, "k") is None
    msg = ckpt.weightless_resume("/c/global_step_1", {**ACTOR, "critic": ["hf_model"]}, "k")
    assert msg.startswith("k: resuming from /c/global_step_1 would load no weights")
    assert "critic.checkpoint.load_contents=['hf_model'] lacks 'model'" in msg and "actor" not in msg


@pytest.mark.slow
def test_cli_with_a_missing_resume_path_fails_before_ray(tmp_path, monkeypatch, capsys):
    _fails_fast(
        tmp_path,
        monkeypatch,
        capsys,
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={tmp_path}/global_step_3",
        match="trainer.resume_from_path: checkpoint folder",
    )


def test_the_manifest_records_a_hash_and_4kb_zeroed_inside_a_file_is_named(tmp_path):
    """The size stays the same: only the content hash recorded at commit can tell."""
    path = _save(str(tmp_path), 1)
    data = os.path.join(path, ckpt.DATA_FILE)
    manifest = json.loads(open(os.path.join(path, MANIFEST)).read())
    assert manifest["sha256"][ckpt.DATA_FILE] == hashlib.sha256(open(data, "rb").read()).hexdigest()
    assert set(manifest["sha256"]) == set(manifest["sizes"]) and ckpt.DATA_FILE in manifest["sizes"]
    size = os.path.getsize(data)
    with open(data, "r+b") as f:
        f.seek(size // 2 - 2048 if size > 4096 else 0)
        f.write(bytes(min(4096, size)))
    assert os.path.getsize(data) == size
    with pytest.raises(
        FileNotFoundError, match=r"k: checkpoint .* is damaged: data.pt has changed since it was saved"
    ):
        ckpt.check_complete(path, ACTOR, 2, "k")


def _outside_checkpoint(tmp_path):
    """A folder outside the run shaped like a step folder, with a file that must survive."""
    outside = tmp_path / "somebody_elses"
    (outside / "actor").mkdir(parents=True)
    (outside / "actor" / "precious.txt").write_text("keep me")
    return outside


def test_a_linked_step_folder_is_never_followed_or_deleted(tmp_path):
    root = tmp_path / "run"
    root.mkdir()
    outside = _outside_checkpoint(tmp_path)
    (root / "global_step_1").symlink_to(outside, target_is_directory=True)
    for step in (2, 3):
        _save(str(root), step)
    with pytest.raises(
        OSError,
        match=r"refusing to delete .*global_step_1/actor: it is \(or is reached through\) a symbolic link",
    ):
        ckpt.rotate(
            str(root), {"actor": 1}, [1, 2, 3]
        )  # would rotate global_step_1/actor out: never through the link
    with pytest.raises(OSError, match="refusing to delete"):
        ckpt.commit(str(root), 1, str(ckpt.begin(str(root), 1)))  # saving step 1 again replaces the link
    (root / ".tmp_global_step_4").symlink_to(outside, target_is_directory=True)
    with pytest.raises(OSError, match="it is a symbolic link"):
        ckpt.begin(str(root), 4)
    assert (outside / "actor" / "precious.txt").read_text() == "keep me"
    lines = ckpt.linked_step_folders(str(root))
    assert [line.split(" is a symbolic link")[0] for line in lines] == [
        str(root / ".tmp_global_step_4"),
        str(root / "global_step_1"),
    ] and all("(outside the run folder)" in line for line in lines)


def test_auto_resume_refuses_a_linked_step_outside_the_run(tmp_path):
    root = tmp_path / "run"
    root.mkdir()
    outside = _outside_checkpoint(tmp_path)
    (root / "global_step_1").symlink_to(outside, target_is_directory=True)
    (root / ckpt.TRACKER).write_text("1")
    with pytest.raises(ValueError, match=r"global_step_1 .* is a symbolic link to .*somebody_elses, outside"):
        ckpt.resolve_resume_path(_trainer_cfg(str(root)))
    _save(str(root), 2)  # a link inside the run folder (to a real checkpoint of it) is followed
    (root / "global_step_3").symlink_to(root / "global_step_2", target_is_directory=True)
    (root / ckpt.TRACKER).write_text("3")
    assert ckpt.resolve_resume_path(_trainer_cfg(str(root))) == str(root / "global_step_3")
