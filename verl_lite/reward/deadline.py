"""A deadline for code running on the driver's main thread: the reward function (reward_model.timeout).

A reward function that never returns would hang the run forever. The function keeps running on the
main thread (as in verl, so functions that time themselves out with `signal.alarm` keep working);
a watchdog thread waits for the deadline and, if the work is still running, sends the main thread
SIGUSR1, whose handler raises `DeadlineExceeded` there. A blocking call (sleep, a lock, a child
process, a socket) is interrupted by the signal; a Python loop stops at its next instruction. The
exception derives from BaseException so a reward function's `except Exception` cannot swallow it.

Code that holds the GIL inside one C call (a catastrophic regular expression) cannot be interrupted
from Python at all: as a last resort faulthandler dumps every thread's stack (into the run's log
file) and ends the process (exit status 1) `grace_s` after the deadline (5-30 s). The run's guard process
(utils/process_guard.py) then prints `last_words` (one line naming the function) and ends every
process the driver started, Ray's included, which would otherwise outlive it.

One watchdog thread serves every deadline of the process: it is started at the first and then
waits for the next (starting and joining a thread per batch cost ~1.3 ms of the driver's step at the
tiny benchmark, on its critical path).

The handler is installed once and stays: a SIGUSR1 that arrives late (after the work finished in
the same instant) finds it disarmed and does nothing, instead of the default action (termination).
Any handler that was there before is still called for signals that are not ours.
"""

from __future__ import annotations

import faulthandler
import logging
import signal
import sys
import threading
import time
from contextlib import contextmanager

from verl_lite.utils import process_guard

SIGNAL = signal.SIGUSR1


class DeadlineExceeded(BaseException):
    """Raised in the main thread when the work under `deadline` runs past it."""


class _State:
    lock = threading.RLock()  # the handler may run in the main thread while it holds the lock
    armed = False  # a deadline is running and has passed: the next SIGUSR1 is ours
    installed = False
    previous = signal.SIG_DFL


class _Watchdog:
    """The one thread that sends SIGUSR1 to the main thread (the only one `deadline` guards) when a
    deadline passes. `jobs` maps a job (a fresh object per `deadline` call) to its monotonic due
    time; a job is removed under the lock when its work finishes, so a job still there when it is due
    is still running."""

    cond = threading.Condition(_State.lock)
    jobs: dict[object, float] = {}
    thread: threading.Thread | None = None

    @classmethod
    def add(cls, job: object, seconds: float) -> None:
        with cls.cond:
            cls.jobs[job] = time.monotonic() + seconds
            if cls.thread is None or not cls.thread.is_alive():  # first use, or a forked child
                cls.thread = threading.Thread(target=cls._run, name="verl_lite-deadline", daemon=True)
                cls.thread.start()
            cls.cond.notify()

    @classmethod
    def _run(cls) -> None:
        with cls.cond:
            while True:
                if not cls.jobs:
                    cls.cond.wait()
                    continue
                job, due = min(cls.jobs.items(), key=lambda item: item[1])
                left = due - time.monotonic()
                if left > 0:
                    cls.cond.wait(left)  # woken early by a new or finished job: look again
                    continue
                del cls.jobs[job]
                _State.armed = True
                signal.pthread_kill(threading.main_thread().ident, SIGNAL)


def _handler(signum, frame):
    with _State.lock:
        ours, _State.armed = _State.armed, False
    if ours:
        raise DeadlineExceeded()
    if callable(_State.previous):
        _State.previous(signum, frame)


def _install() -> None:
    if not _State.installed:
        _State.previous = signal.signal(SIGNAL, _handler)
        _State.installed = True


def _dump_file():
    """Where the backstop's stack dump goes: the driver's log file when there is one (utils/logs.py),
    not the console, which gets the guard's one line instead."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and handler.stream is not None:
            return handler.stream
    return sys.__stderr__


def _arm_backstop(seconds: float) -> bool:
    try:
        faulthandler.dump_traceback_later(seconds, exit=True, file=_dump_file())
        return True
    except (AttributeError, ValueError, OSError):  # no usable stderr file descriptor
        return False


@contextmanager
def deadline(seconds: float | None, grace_s: float | None = None, last_words: str | None = None):
    """Raise DeadlineExceeded in the body if it runs longer than `seconds` (None: no deadline).
    Only on the main thread (signals are delivered there); elsewhere the body runs unguarded.
    `grace_s`: how long after the deadline the backstop waits for the interruption to land (default:
    the deadline itself, between 5 and 30 s). `last_words`: the line the guard prints if the body
    cannot be interrupted and the backstop ends the process."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return
    _install()
    job = object()
    grace_s = min(30.0, max(5.0, seconds)) if grace_s is None else grace_s
    backstop = _arm_backstop(seconds + grace_s)
    process_guard.note(last_words)
    _Watchdog.add(job, seconds)
    try:
        yield
    finally:
        if backstop:
            faulthandler.cancel_dump_traceback_later()
        process_guard.note(None)
        with _State.lock:
            _Watchdog.jobs.pop(job, None)  # from now on no signal is sent for it
            _State.armed = False  # a signal sent in this very instant is then ignored when it lands
