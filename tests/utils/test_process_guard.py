"""utils/process_guard.py: the guard lets a finished driver go at once, and still ends what it leaves.

The guard inherits the driver's stderr. A caller that reads a run's output to its end before it
collects the exit status (`subprocess.run(..., capture_output=True)`) leaves the exited driver a
zombie meanwhile; a guard that counted the zombie as running held the pipe open for its full 10 s
wait, so every such caller got the run's end 10 s late (every CLI test did).
"""

import os
import select
import subprocess
import sys
import time

import psutil

from verl_lite.utils import process_guard

# a driver that starts its guard and a grandchild that would outlive it, prints the grandchild's
# pid and exits without waiting for it, once the guard has had time to record it (it looks every
# POLL_S)
DRIVER = f"""
import subprocess, sys, time
from verl_lite.utils import process_guard
process_guard.start()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(child.pid, flush=True)
time.sleep({4 * process_guard.POLL_S})
"""


def _read_to_end(proc: subprocess.Popen, timeout: float) -> bool:
    """Read the process's stdout and stderr to their end without collecting its exit status (as
    `communicate` would); False if they are still open after `timeout` seconds."""
    pipes = {proc.stdout, proc.stderr}
    deadline = time.monotonic() + timeout
    while pipes and time.monotonic() < deadline:
        ready, _, _ = select.select(list(pipes), [], [], 0.5)
        for pipe in ready:
            if not os.read(pipe.fileno(), 65536):
                pipes.discard(pipe)
    return not pipes


def _zombie() -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.05)
    return proc


def test_an_exited_driver_not_yet_collected_is_not_running():
    zombie = _zombie()
    try:
        assert psutil.Process(
            zombie.pid
        ).is_running()  # psutil's own view: why the guard must not use it alone
        assert not process_guard._running(psutil, psutil.Process(zombie.pid))
    finally:
        zombie.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert process_guard._running(psutil, psutil.Process(alive.pid))
    finally:
        alive.kill()
        alive.wait()


# as DRIVER, but the grandchild holds no pipe of the run's (as Ray's processes, which log to files)
# and ignores SIGTERM, so the guard is still ending it for its 3 s before SIGKILL
DRIVER_QUIET_LEFTOVER = f"""
import subprocess, sys, time
from verl_lite.utils import process_guard
process_guard.start()
# the grandchild says its pid once it ignores SIGTERM, then closes that pipe
child = subprocess.Popen(
    [sys.executable, "-c", "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
     "print(os.getpid(), flush=True); os.close(1); time.sleep(600)"],
    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
)
print(child.stdout.readline().strip(), flush=True)
child.stdout.close()
time.sleep({4 * process_guard.POLL_S})
"""


def _ended(pid: int, timeout: float) -> bool:
    """Whether process `pid` has exited (gone, or a zombie nobody collected yet) within `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_the_runs_output_ends_with_the_driver_while_the_guard_still_ends_its_leftovers():
    """The guard closes the stderr it inherited before it ends the leftovers (SIGTERM, 3 s, SIGKILL):
    a caller reading the run's output gets its end when the driver exits, not after the leftovers."""
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER_QUIET_LEFTOVER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    grandchild = psutil.Process(int(driver.stdout.readline()))
    try:
        assert _read_to_end(driver, timeout=60), "the run's output did not end"
        assert grandchild.is_running() and grandchild.status() != psutil.STATUS_ZOMBIE  # still being ended
        assert _ended(grandchild.pid, timeout=60)  # and then ended by the guard (SIGKILL: it ignores SIGTERM)
    finally:
        if grandchild.is_running():
            grandchild.kill()
        assert driver.wait() == 0


def test_the_guard_ends_the_drivers_leftovers_while_the_driver_is_still_uncollected():
    """End to end, as `subprocess.run(capture_output=True)` runs the CLI: the driver exits and is
    left uncollected while the caller reads the pipe, which the guard and the driver's leftover
    grandchild hold too; the pipe still reaches its end, with the grandchild ended by the guard."""
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    grandchild = int(driver.stdout.readline())
    if not _read_to_end(driver, timeout=60):  # the end of the pipes: the guard and the grandchild are gone
        psutil.Process(grandchild).kill()
        raise AssertionError("the driver's grandchild still held its pipe 60 s after the driver exited")
    try:
        assert psutil.Process(driver.pid).status() == psutil.STATUS_ZOMBIE  # not collected yet
        # its pipe ends as its exit begins (the guard no longer holds the pipe while ending it)
        assert _ended(grandchild, timeout=30), "the guard left the driver's grandchild running"
    finally:
        assert driver.wait() == 0
