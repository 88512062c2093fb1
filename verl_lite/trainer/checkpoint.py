"""Checkpoints on the driver's side: the layout, committing a checkpoint atomically, rotation, resume.

Under trainer.default_local_dir:

    global_step_N/
        actor/ critic/                 each role's engine state, written by its workers (engine/checkpoint.py)
        data.pt                        the driver's state: global step and the sampler's position
        manifest.json                  every file's size and SHA-256, recorded at commit (utils/manifest.py)
    latest_checkpointed_iteration.txt  N of the newest complete checkpoint

A checkpoint is written into `.tmp_global_step_N/`. Only when every worker has returned and the
driver has written data.pt are all files and folders fsynced and the folder renamed to
`global_step_N` (one rename: a folder of that name is always complete); then the tracker file is
replaced the same way (temp file, fsync, os.replace). A crash at any point leaves the previous
checkpoint and the tracker pointing at it untouched. A save that fails (a full disk) removes its
temp folder (`discard`), and the next save removes any leftover temp folder of any step (`begin`).
Before a resume, `check_complete` finds every file the run will load, at the size and with the
content hash the manifest recorded (a shard cut short, deleted or overwritten is named before Ray
starts); a folder without a manifest cannot be verified and is refused unless
trainer.resume_without_manifest=True says to trust it; checkpoint_vet.py then vets their contents
(and that data.pt's step is the folder's).
Old checkpoints are removed after the new one is committed (only those this run saved, as verl
does), renamed aside first, so a crash mid-delete never leaves a half-deleted folder under a
checkpoint's name. Nothing is deleted or
followed through a symbolic link: a linked global_step_N may be somebody else's folder.
"""

from __future__ import annotations

import logging
import os
import re
import shutil

import torch

from verl_lite.engine.checkpoint import MODEL_DIR, OPTIM_DIR, extra_state_name
from verl_lite.utils.manifest import MANIFEST, manifest_problems, write_manifest

log = logging.getLogger(__name__)

TRACKER = "latest_checkpointed_iteration.txt"
DATA_FILE = "data.pt"
TMP_PREFIX = ".tmp_global_step_"
TRASH_PREFIX = ".trash_"  # a folder being deleted (renamed aside first: _remove)
STEP_DIR = re.compile(r"^global_step_(\d+)$")
RESUME_MODES = ("auto", "disable", "resume_path")


def step_dir(root: str, step: int) -> str:
    return os.path.join(root, f"global_step_{step}")


def begin(root: str, step: int) -> str:
    """A fresh, empty temp folder for step `step`'s checkpoint; the temp folders a crashed or failed
    save of any step left behind are removed first (never through a link)."""
    tmp = os.path.join(root, f"{TMP_PREFIX}{step}")
    if os.path.islink(tmp):
        raise OSError(f"refusing to write a checkpoint into {tmp}: it is a symbolic link")
    for name in os.listdir(root) if os.path.isdir(root) else []:  # and what a killed deletion left
        if name.startswith((TMP_PREFIX, TRASH_PREFIX)) and not os.path.islink(os.path.join(root, name)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    os.makedirs(tmp)
    return tmp


def discard(tmp: str) -> None:
    """Remove the temp folder of a save that failed (a full disk leaves a partial one)."""
    if not os.path.islink(tmp):
        shutil.rmtree(tmp, ignore_errors=True)


def write_trainer_state(
    folder: str, global_step: int, sampler_state: dict, driver: dict | None = None
) -> None:
    """The driver's part: step, sampler position, and `driver` (e.g. the adaptive KL coefficient)."""
    state = {"global_step": global_step, "sampler": sampler_state, "driver": driver or {}}
    torch.save(state, os.path.join(folder, DATA_FILE))


def read_trainer_state(folder: str) -> dict:
    return torch.load(os.path.join(folder, DATA_FILE), weights_only=True)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(folder: str) -> None:
    for dirpath, _, files in os.walk(folder, topdown=False):
        for name in files:
            _fsync(os.path.join(dirpath, name))
        _fsync(dirpath)


def _inside(root: str, path: str) -> bool:
    """`path` resolves inside `root` (links followed)."""
    real_root = os.path.realpath(root)
    return os.path.commonpath([real_root, os.path.realpath(path)]) == real_root


def _through_link(root: str, path: str) -> bool:
    """`path` (below `root`) is a symbolic link or is reached through one."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    return rel.startswith("..") or os.path.realpath(path) != os.path.join(os.path.realpath(root), rel)


def _refuse_link(root: str, path: str) -> None:
    if _through_link(root, path):
        raise OSError(
            f"refusing to delete {path}: it is (or is reached through) a symbolic link to "
            f"{os.path.realpath(path)}; only real folders under {root} are rotated or replaced"
        )


def _remove(root: str, path: str) -> None:
    """Rename aside, then delete: a name that looks like a checkpoint never points at half a one.
    Never through a symbolic link: a linked checkpoint may be anybody's folder."""
    _refuse_link(root, path)
    trash = os.path.join(root, f"{TRASH_PREFIX}{os.path.basename(path)}_{os.getpid()}")
    os.rename(path, trash)
    shutil.rmtree(trash)


def linked_step_folders(root: str) -> list[str]:
    """One line per checkpoint-named entry of `root` (global_step_N, its temp folder) that is a
    symbolic link: a run that saves there would replace or rotate through it."""
    if not os.path.isdir(root):
        return []
    lines = []
    for name in sorted(os.listdir(root)):
        full = os.path.join(root, name)
        if (STEP_DIR.match(name) or name.startswith(".tmp_global_step_")) and os.path.islink(full):
            where = "outside the run folder" if not _inside(root, full) else "inside the run folder"
            lines.append(f"{full} is a symbolic link to {os.path.realpath(full)} ({where})")
    return lines


def commit(root: str, step: int, tmp: str) -> str:
    """Publish the temp folder as global_step_`step` and point the tracker at it."""
    write_manifest(tmp)
    _fsync_tree(tmp)
    final = step_dir(root, step)
    if os.path.lexists(final):  # a run restarted without resume writes the same step again
        _remove(root, final)
    os.rename(tmp, final)
    _fsync(root)
    tracker_tmp = os.path.join(root, f".{TRACKER}.tmp")
    with open(tracker_tmp, "w") as f:
        f.write(str(step))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tracker_tmp, os.path.join(root, TRACKER))
    _fsync(root)
    return final


def saved_steps(root: str) -> list[int]:
    if not os.path.isdir(root):
        return []
    return sorted(int(m.group(1)) for m in map(STEP_DIR.match, os.listdir(root)) if m)


def rotate(root: str, keep: dict[str, int | None], saved: list[int]) -> None:
    """Keep the newest `keep[role]` of the checkpoints this run saved (`saved`, in the order it
    committed them; None: all), as verl rotates only the paths its checkpoint manager saved. A
    folder the run did not write (an earlier run's, a later step left behind by a rollback) is never
    touched, so the step just committed is never ranked behind it. A step folder that would be left
    with no role goes whole, in one rename: a run killed between two removals never leaves a
    global_step_N that names a checkpoint it no longer holds."""
    steps = [s for s in dict.fromkeys(saved) if os.path.isdir(step_dir(root, s))]
    dropped: dict[int, set[str]] = {}
    for role, limit in keep.items():
        if limit is None or limit <= 0:
            continue
        with_role = [s for s in steps if os.path.isdir(os.path.join(step_dir(root, s), role))]
        for s in with_role[:-limit]:
            dropped.setdefault(s, set()).add(role)
    for s in steps:
        folder = step_dir(root, s)
        held = {role for role in keep if os.path.isdir(os.path.join(folder, role))}
        gone = dropped.get(s, set())
        if not gone:
            continue
        if held <= gone:
            for role in sorted(gone):  # what rotation drops is the roles: a link is refused naming them
                _refuse_link(root, os.path.join(folder, role))
            _remove(root, folder)
        else:
            for role in sorted(gone):
                _remove(root, os.path.join(folder, role))


def latest_step(root: str) -> int | None:
    """The step the tracker file names (None without one); ValueError naming the file when it is
    not a step number (a folder, unreadable, binary or other text)."""
    tracker = os.path.join(root, TRACKER)
    if not os.path.lexists(tracker):
        return None
    fix = "delete it to start afresh, or write the step of a complete global_step_N folder into it"
    try:
        with open(tracker, "rb") as f:
            raw = f.read(64)
    except OSError as e:
        raise ValueError(f"{tracker} cannot be read ({e.strerror}); {fix}") from e
    text = raw.decode("ascii", errors="replace").strip()
    if not text.isdigit():
        if not raw.strip():
            shown = "nothing (it is empty)"
        elif raw.isascii():
            shown = repr(text)
        else:
            shown = f"bytes that are not text ({raw[:16]!r})"
        raise ValueError(f"{tracker} is corrupt: it holds {shown}, not a step number; {fix}")
    return int(text)


def resume_problems(trainer_cfg) -> list[str]:
    """What is wrong with trainer.resume_mode / resume_from_path (start-up and resolve_resume_path)."""
    t = trainer_cfg
    if t.resume_mode not in RESUME_MODES:
        return [f"trainer.resume_mode={t.resume_mode!r} is not one of {list(RESUME_MODES)}"]
    if t.resume_mode == "resume_path" and not t.resume_from_path:
        return ["trainer.resume_mode=resume_path needs trainer.resume_from_path=<.../global_step_N>"]
    return []


def resolve_resume_path(trainer_cfg) -> str | None:
    """The checkpoint folder this run resumes from, or None to start from scratch."""
    t = trainer_cfg
    problems = resume_problems(t)
    if problems:
        raise ValueError(problems[0])
    if t.resume_mode == "disable":
        return None
    if t.resume_mode == "resume_path":
        return os.path.abspath(os.path.expanduser(t.resume_from_path))
    step = latest_step(t.default_local_dir)
    if step is None:
        return None
    path = step_dir(os.path.abspath(t.default_local_dir), step)
    if os.path.islink(path) and not _inside(t.default_local_dir, path):
        raise ValueError(
            f"trainer.resume_mode=auto: {path} ({TRACKER}'s step) is a symbolic link to "
            f"{os.path.realpath(path)}, outside trainer.default_local_dir; refusing to follow it: resume "
            "from it explicitly (trainer.resume_mode=resume_path trainer.resume_from_path=...) or remove the link"
        )
    return path


def weightless_resume(path: str, roles: dict[str, list[str]], key: str) -> str | None:
    """A resume whose load_contents lacks 'model' would continue at the saved step from the initial
    weights (verl's behaviour, silently): the problem line, or None."""
    lacking = [role for role, contents in roles.items() if "model" not in contents]
    if not lacking:
        return None
    section = {"actor": "actor_rollout_ref.actor", "critic": "critic"}
    keys = ", ".join(f"{section.get(r, r)}.checkpoint.load_contents={list(roles[r])}" for r in lacking)
    return (
        f"{key}: resuming from {path} would load no weights ({keys} lacks 'model'); add 'model' to "
        "save_contents and load_contents, or set trainer.resume_mode=disable"
    )


def check_complete(
    path: str, roles: dict[str, list[str]], world_size: int, key: str, without_manifest: bool = False
) -> None:
    """Raise naming `key` when `path` is not a complete checkpoint holding `roles[role]` contents.
    `without_manifest` (trainer.resume_without_manifest): a folder with no manifest is trusted."""
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"{key}: checkpoint folder {path!r} does not exist; point it at an existing global_step_N folder, "
            "or set trainer.resume_mode=disable to start afresh"
        )
    if not without_manifest and not os.path.lexists(os.path.join(path, MANIFEST)):
        raise FileNotFoundError(
            f"{key}: checkpoint {path!r} has no {MANIFEST}, so its files cannot be verified (deleted, or saved "
            "before verl_lite wrote manifests); point the resume at another global_step_N folder, or set "
            "trainer.resume_without_manifest=True to trust this one"
        )
    needed = [DATA_FILE]
    for role, contents in roles.items():
        if "model" in contents:
            needed.append(os.path.join(role, MODEL_DIR, ".metadata"))
        if "optimizer" in contents:
            needed.append(os.path.join(role, OPTIM_DIR, ".metadata"))
        if "extra" in contents:
            needed += [os.path.join(role, extra_state_name(world_size, r)) for r in range(world_size)]
    missing = [n for n in needed if not os.path.exists(os.path.join(path, n))]
    if missing:
        raise FileNotFoundError(
            f"{key}: checkpoint {path!r} is incomplete or does not match this run: missing {missing}. "
            "Point it at another global_step_N folder, resume with the world size it was saved with, "
            "or narrow the role's checkpoint.load_contents"
        )
    wrong = manifest_problems(path, tuple(_loaded_prefixes(roles)))  # missing, resized or changed
    if wrong:
        raise FileNotFoundError(
            f"{key}: checkpoint {path!r} is damaged: {'; '.join(wrong[:5])}"
            f"{f' (and {len(wrong) - 5} more)' if len(wrong) > 5 else ''}. Point it at another global_step_N folder"
        )


def _loaded_prefixes(roles: dict[str, list[str]]) -> list[str]:
    """Relative path prefixes of the files a resume with these load_contents reads."""
    prefixes = [DATA_FILE]
    for role, contents in roles.items():
        for content, sub in (("model", MODEL_DIR), ("optimizer", OPTIM_DIR)):
            if content in contents:
                prefixes.append(os.path.join(role, sub) + os.sep)
        if "extra" in contents:
            prefixes.append(os.path.join(role, "extra_state_"))
    return prefixes
