"""The deadline that bounds a reward function: it interrupts sleeps and Python loops, cannot be
swallowed by `except Exception`, leaves quick work alone, and a late signal does no harm."""

import os
import signal
import threading
import time

import pytest

from verl_lite.reward.deadline import SIGNAL, DeadlineExceeded, deadline


def test_a_sleep_and_a_busy_loop_are_interrupted():
    start = time.perf_counter()
    with pytest.raises(DeadlineExceeded):
        with deadline(0.3):
            time.sleep(30)
    with pytest.raises(DeadlineExceeded):
        with deadline(0.3):
            while True:
                pass
    assert time.perf_counter() - start < 20  # both stopped near their deadline, not at 30 s / never


def test_except_exception_cannot_swallow_it():
    def stubborn():
        while True:
            try:
                time.sleep(30)
            except Exception:  # a reward function guarding itself too broadly
                pass

    with pytest.raises(DeadlineExceeded):
        with deadline(0.3):
            stubborn()


def test_quick_work_is_untouched_and_a_late_signal_is_harmless():
    for _ in range(20):
        with deadline(5.0):
            total = sum(range(1000))
    assert total == 499500
    os.kill(os.getpid(), SIGNAL)  # no deadline armed: ignored, not the default action (termination)
    time.sleep(0.05)
    assert signal.getsignal(SIGNAL) is not signal.SIG_DFL


def test_no_deadline_off_the_main_thread_or_without_seconds():
    out = []

    def worker():
        with deadline(0.01):
            time.sleep(0.1)
        out.append("done")

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert out == ["done"]
    with deadline(None):
        time.sleep(0.01)
