"""Running a command as its own process group and seeing what it leaves behind.

`run_watched` records every descendant of the command (pid and start time) while it runs, so a
process that was reparented to init after its parent died is still known; `survivors` are those
still alive a few seconds after the command ended. `small_filesystem` wraps a command so that it
runs with a tiny tmpfs mounted at a folder (a real full disk: ENOSPC), where this machine allows a
private mount (unshare), else None.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass

import psutil


@dataclass
class Watched:
    returncode: int
    output: str  # stdout and stderr, interleaved as printed
    seconds: float
    survivors: list[str]  # "pid cmdline" of descendants still alive after the command ended


def run_watched(cmd: list[str], timeout: float, settle_s: float = 8.0) -> Watched:
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    seen: dict[int, tuple[float, str]] = {}
    while proc.poll() is None:
        if time.perf_counter() - start > timeout:
            proc.kill()
            raise TimeoutError(f"{cmd[:4]}... still running after {timeout:.0f}s:\n{''.join(lines)[-3000:]}")
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                seen.setdefault(child.pid, (child.create_time(), " ".join(child.cmdline())[:120]))
        except psutil.Error:
            pass
        time.sleep(0.2)
    seconds = time.perf_counter() - start
    reader.join(timeout=10)
    deadline = time.monotonic() + settle_s  # a process exiting on its own gets a moment
    alive = list(seen.items())
    while alive and time.monotonic() < deadline:
        time.sleep(0.5)
        alive = [(pid, info) for pid, info in alive if _same_process_alive(pid, info[0])]
    return Watched(proc.returncode, "".join(lines), seconds, [f"{pid} {info[1]}" for pid, info in alive])


def _same_process_alive(pid: int, started: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.create_time() == started and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_survivors(survivors: list[str]) -> None:
    for line in survivors:
        try:
            psutil.Process(int(line.split()[0])).kill()
        except psutil.Error:
            pass


def small_filesystem(folder: str, size: str, cmd: list[str]) -> list[str] | None:
    """`cmd` run with a `size` tmpfs mounted at `folder`, in a mount namespace of its own (root's
    `unshare -m`, or a user namespace's `unshare -Urm`); None when neither is allowed here."""
    mount = 'mount -t tmpfs -o size="$1" tmpfs "$0" && shift && exec "$@"'
    for flags in (["-m"], ["-Urm"]):
        probe = ["unshare", *flags, "sh", "-c", mount, folder, "64k", "true"]
        try:
            if subprocess.run(probe, capture_output=True, timeout=30).returncode == 0:
                return ["unshare", *flags, "sh", "-c", mount, folder, size, *cmd]
        except (OSError, subprocess.TimeoutExpired):
            continue
    return None
