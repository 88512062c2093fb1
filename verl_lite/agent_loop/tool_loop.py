"""The worker's one event loop for tools and interactions, running in a thread of its own.

verl runs every tool call of an agent worker on one asyncio loop, so a tool may hold asyncio objects
across calls: an `asyncio.Semaphore(4)` made in `__init__` to rate-limit an API, an `asyncio.Lock`
around shared state. Such objects bind to the loop that first waits on them; a call run on any other
loop then fails ("bound to a different event loop") or never wakes. So every async tool and
interaction method of a worker runs on one long-lived ToolLoop (the ToolRunner's: one per worker,
agent_loop/tool_calls.py), whichever rollout call's event loop asked for it. The loop lives in a
daemon thread (it never holds the process at exit), started at the first call and stopped when
its runner is gone.

A coroutine that blocks this loop (time.sleep, a blocking socket) stalls every tool of the worker
until it returns, as in verl; a blocking tool writes plain `def` methods instead, which the runner
runs in threads.
"""

from __future__ import annotations

import asyncio
import threading


class ToolLoop:
    def __init__(self):
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop, started in its thread on first use."""
        with self._lock:
            if self._loop is None:
                loop, started = asyncio.new_event_loop(), threading.Event()

                def serve():
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.run_forever()

                threading.Thread(target=serve, name="verl_lite-tool-loop", daemon=True).start()
                started.wait()
                self._loop = loop
            return self._loop

    def submit(self, coro):
        """Run `coro` on the loop: a concurrent.futures.Future of its result (cancel it to cancel the task)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        """Stop the loop's thread (once its current callback returns). Safe to call more than once."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(loop.stop)
            except RuntimeError:  # closed meanwhile
                pass
