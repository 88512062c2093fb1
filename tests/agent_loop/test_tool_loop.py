"""agent_loop/tool_loop.py: the worker's tool loop, closed with calls still on it, ends them.

The calls here queue behind a callback that blocks the loop (as a tool doing time.sleep inside
`async def` does), so when the runner goes they have not started: a loop that was only stopped kept
them, and the garbage collector's close of it made asyncio print "Task was destroyed but it is
pending!" for each (seen at the end of the agent-loop tests).

The loop is known to be inside the blocking callback before the calls are submitted: their
submissions and the close's stop then run in one later batch of the loop, so the calls never begin.
A fixed blocking time (2 s) was not enough for that: the loop thread could wake between the
submissions and the stop and take the submissions alone into the blocked batch, and the calls' first
steps then shared the stop's batch and began (seen after test_tool_calls.py in the same process,
whose leftover threads shifted that wake-up).
"""

import asyncio
import gc
import logging
import threading
import time
from concurrent.futures import CancelledError

from verl_lite.agent_loop.tool_loop import ToolLoop


def test_closing_with_calls_left_cancels_them_and_closes_the_loop(caplog):
    ended = []

    async def call(i):
        try:
            await asyncio.sleep(30)
        finally:
            ended.append(i)

    tools = ToolLoop()
    loop = tools.loop
    started = tools.submit(call(3))  # a call under way
    time.sleep(0.2)
    inside, release = threading.Event(), threading.Event()
    loop.call_soon_threadsafe(lambda: (inside.set(), release.wait(30)))  # a tool blocking the loop
    assert inside.wait(30)
    futures = [tools.submit(call(i)) for i in range(3)]  # queued behind it, not started
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        tools.close(timeout=0)  # the stop is queued behind the calls; the loop is still blocked
        release.set()
        deadline = time.monotonic() + 30
        while not loop.is_closed() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert loop.is_closed()
        for future in [*futures, started]:  # the callers hear of it: each call was cancelled
            try:
                future.result(timeout=1)
                raise AssertionError("a call left at close returned")
            except CancelledError:
                pass
        del loop, futures, started
        gc.collect()
    assert not [r for r in caplog.records if "destroyed but it is pending" in r.getMessage()]
    assert ended == [3]  # the call under way unwound through its finally; the others never began
    tools.close()  # a second close does nothing
    assert tools.submit(asyncio.sleep(0, "again")).result(timeout=5) == "again"  # a fresh loop
    tools.close()


def test_end_loop_without_drain_time_still_cancels_every_task(caplog):
    """drain_s=0: each task is cancelled once and unwinds; none is left for asyncio to report."""
    from verl_lite.agent_loop.tool_loop import end_loop

    ended = []

    async def task():
        try:
            await asyncio.sleep(30)
        finally:
            ended.append(True)

    loop = asyncio.new_event_loop()
    tasks = [loop.create_task(task()) for _ in range(2)]
    loop.run_until_complete(asyncio.sleep(0))  # both started
    with caplog.at_level(logging.WARNING):
        end_loop(loop, "tasks", drain_s=0)
        del tasks
        gc.collect()
    assert loop.is_closed() and ended == [True, True]
    assert not [r for r in caplog.records if "pending" in r.getMessage() or "did not end" in r.getMessage()]
