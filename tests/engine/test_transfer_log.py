"""Copies timed by device events (activation offload's side streams, manual offload's): their
seconds are read when the step's metrics are taken, with one wait for all of them, not one per copy.

CUDA events do not exist on CPU, so the events here are stand-ins with CUDA events' two methods
(`query`: has it completed; `elapsed_time(other)`: milliseconds between); what is tested is the
TransferLog's and utils/device's bookkeeping around them."""

from verl_lite.engine.offload import TransferLog
from verl_lite.utils import device as dev


class Event:
    def __init__(self, ms: float, done: bool):
        self.ms, self.done = ms, done

    def query(self) -> bool:
        return self.done

    def elapsed_time(self, stop) -> float:
        assert stop.done, "read only after a wait"
        return stop.ms - self.ms


def test_event_timed_copies_are_read_at_pop_with_one_wait(monkeypatch):
    waits = []

    def synchronize():  # the device-wide wait: every event has completed afterwards
        waits.append(1)
        for e in events:
            e.done = True

    monkeypatch.setattr(dev, "synchronize", synchronize)
    events = [Event(ms, done=False) for ms in (0.0, 2.0, 5.0, 9.0, 10.0, 30.0)]
    log = TransferLog()
    log.add_events("update/activations", False, 100, events[0], events[1])
    log.add_events("update/activations", False, 50, events[2], events[3])
    log.add_events("update/activations", True, 150, events[4], events[5])
    log.add("update", True, 10, 0.5)  # a copy timed on the host, inline
    assert waits == [], "queueing a copy's timing never waits"
    moved = log.pop()
    assert waits == [1], "one wait for all of them"
    t = moved["update/activations"]
    assert (t.d2h_bytes, t.h2d_bytes) == (150, 150)
    assert abs(t.d2h_s - 0.006) < 1e-12 and abs(t.h2d_s - 0.020) < 1e-12
    assert moved["update"].h2d_s == 0.5
    assert log.pop() == {} and waits == [1], "popped once; nothing left to wait for"


def test_completed_events_need_no_wait(monkeypatch):
    monkeypatch.setattr(dev, "synchronize", lambda: (_ for _ in ()).throw(AssertionError("waited")))
    assert dev.elapsed_many([(Event(1.0, True), Event(4.0, True))]) == [0.003]
    assert dev.elapsed_many([]) == []
