"""A guard process that takes every process the run started down with the driver, however it ends.

Ray's local processes outlive a driver that does not end through `ray.shutdown()`: after a driver
killed by a signal, or ended by the reward deadline's last resort (reward/deadline.py: a reward
function stuck in C code holds the GIL, so the process can only be ended from outside Python),
Ray's agents (ray::DashboardAgent, ray::RuntimeEnvAgent) were seen running a minute later,
reparented to init. Nothing inside the driver can help then, so a small separate process does:

- `start()` spawns `python -m verl_lite.utils.process_guard <driver pid>` (its own session, so a
  Ctrl-C to the terminal reaches the driver, which shuts Ray down itself) with a pipe from the
  driver on its stdin;
- the guard records the driver's descendants (pid and start time) every half second, so it still
  knows Ray's agents after the raylet that started them is gone;
- when the pipe closes (the driver has exited, for whatever reason), it closes the stderr it
  inherited (so a caller reading the run's output gets its end with the driver's exit, not up to
  3 s later), ends every recorded process still alive (SIGTERM, then SIGKILL after 3 s) and exits.
  After a clean shutdown Ray's processes may still be on their way out; the guard ends them.

`note(text)` leaves last words: a line the guard prints on the run's stderr if the driver dies while
it is set (the reward deadline sets one, naming the function, before calling it).
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time

POLL_S = 0.5
_guard: subprocess.Popen | None = None


def start() -> None:
    """Start this process's guard (once)."""
    global _guard
    if _guard is not None and _guard.poll() is None:
        return
    _guard = subprocess.Popen(
        [sys.executable, "-m", "verl_lite.utils.process_guard", str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )


def note(text: str | None) -> None:
    """Last words for the guard to print if this process dies before `note(None)`."""
    if _guard is None or _guard.poll() is not None:
        return
    try:
        _guard.stdin.write(("note " + " ".join(text.split()) if text else "clear") + "\n")
        _guard.stdin.flush()
    except OSError:  # the guard is gone: nothing to tell it
        pass


def _record(psutil, driver, known: dict[int, float]) -> None:
    try:
        for child in driver.children(recursive=True):
            if child.pid != os.getpid():
                known.setdefault(child.pid, child.create_time())
    except psutil.Error:
        pass


def _end(psutil, known: dict[int, float]) -> None:
    alive = []
    for pid, started in known.items():
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == started:  # not a new process that reused the pid
                proc.terminate()
                alive.append(proc)
        except psutil.Error:
            pass
    _, still = psutil.wait_procs(alive, timeout=3)
    for proc in still:
        try:
            proc.kill()
        except psutil.Error:
            pass


def _running(psutil, driver) -> bool:
    """Whether the driver is still running. An exited driver whose parent has not collected its
    status yet (`subprocess.run(..., capture_output=True)` reads the pipes to their end first) is a
    zombie, which psutil's `is_running()` counts as running: waiting on it held the pipes this guard
    inherited open for the full 10 s, so every such caller got the run's output 10 s late."""
    try:
        return driver.is_running() and driver.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _watch(driver_pid: int) -> None:
    import psutil

    try:
        driver = psutil.Process(driver_pid)
    except psutil.Error:
        return
    known: dict[int, float] = {}
    last_words = None
    selector = selectors.DefaultSelector()
    selector.register(sys.stdin, selectors.EVENT_READ)
    while True:
        _record(psutil, driver, known)
        if not selector.select(POLL_S):
            continue
        line = sys.stdin.readline()
        if not line:  # the driver has exited (or is exiting): its pipe is closed
            break
        last_words = line[5:].strip() if line.startswith("note ") else None
    deadline = time.monotonic() + 10  # a driver still closing down: let it finish its own shutdown
    while _running(psutil, driver) and time.monotonic() < deadline:
        time.sleep(0.1)
    if last_words:
        print(last_words, file=sys.stderr, flush=True)
    # nothing more to say: the run's stderr closes with the driver's, not after the leftovers (fd 2 onto
    # /dev/null rather than closed, so no file opened while ending them becomes this process's stderr)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    _end(psutil, known)


if __name__ == "__main__":
    _watch(int(sys.argv[1]))
