"""The worker's one event loop for tools and interactions, running in a thread of its own.

verl runs every tool call of an agent worker on one asyncio loop, so a tool may hold asyncio objects
across calls: an `asyncio.Semaphore(4)` made in `__init__` to rate-limit an API, an `asyncio.Lock`
around shared state. Such objects bind to the loop that first waits on them; a call run on any other
loop then fails ("bound to a different event loop") or never wakes. So every async tool and
interaction method of a worker runs on one long-lived ToolLoop (the ToolRunner's: one per worker,
agent_loop/tool_calls.py), whichever rollout call's event loop asked for it. The loop lives in a
daemon thread (it never holds the process at exit), started at the first call and stopped when
its runner is gone.

Stopping ends the loop as `asyncio.run` ends its own: every task still there (a call that was
queued behind a blocking one, or whose caller gave up) is cancelled and given DRAIN_S seconds to
unwind, so its `finally` blocks run and its caller's future is resolved (cancelled), and only then
is the loop closed. A loop merely stopped would keep such tasks until the garbage collector closed
it, and asyncio would then report each as "Task was destroyed but it is pending!".

A coroutine that blocks this loop (time.sleep, a blocking socket) stalls every tool of the worker
until it returns, as in verl; a blocking tool writes plain `def` methods instead, which the runner
runs in threads.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading

log = logging.getLogger(__name__)
DRAIN_S = 5.0  # how long the tasks left at close may take to unwind their cancellation


class ToolLoop:
    def __init__(self):
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop, started in its thread on first use. Not while the interpreter is finalizing: a
        thread started then never runs, and a coroutine closed by the garbage collector at exit (a
        trajectory's loop left pending, its `finally` releasing its tools) would wait for it forever."""
        with self._lock:
            if self._loop is None and sys.is_finalizing():
                raise RuntimeError("the worker is exiting: its tool loop is closed")
            if self._loop is None:
                loop, started = asyncio.new_event_loop(), threading.Event()

                def serve():
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    try:
                        loop.run_forever()
                    finally:
                        end_loop(loop, "tool calls")

                self._thread = threading.Thread(target=serve, name="verl_lite-tool-loop", daemon=True)
                self._thread.start()
                started.wait()
                self._loop = loop
            return self._loop

    def submit(self, coro):
        """Run `coro` on the loop: a concurrent.futures.Future of its result (cancel it to cancel the task)."""
        loop = self.loop
        try:
            return asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:  # closed between the lookup and the call: the coroutine never starts
            coro.close()
            raise RuntimeError("the worker's tool loop was closed while a call was being submitted") from None

    def close(self, timeout: float = DRAIN_S + 1.0) -> None:
        """Stop the loop, end the tasks left on it (module docstring) and close it; wait for that at
        most `timeout` seconds (a coroutine blocking the loop may hold it longer: the thread, a
        daemon, then finishes on its own). Safe to call more than once."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:  # closed meanwhile
            return
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


def end_loop(loop: asyncio.AbstractEventLoop, what: str, drain_s: float = DRAIN_S) -> None:
    """Cancel every task of the stopped `loop` (`what` they are, for the warning), run it until they
    have unwound (at most `drain_s` seconds; a task submitted meanwhile is cancelled too), then close
    it. The tool loop's close and the agent rounds' (agent_loop/rounds.py) end their loops with it."""
    try:
        deadline = loop.time() + drain_s
        pending = asyncio.all_tasks(loop)
        while pending:  # each task is cancelled at least once, whatever drain_s
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.wait(pending, timeout=max(0.0, deadline - loop.time())))
            pending = asyncio.all_tasks(loop)
            if loop.time() >= deadline:
                break
        if pending:  # a task that swallows its cancellation: asyncio reports it when the loop goes
            log.warning("%d %s did not end within %g s of their loop's close", len(pending), what, drain_s)
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
