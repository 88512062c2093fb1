"""Python's cyclic garbage collector paused while a verl_lite process imports its libraries, and
what they built frozen after.

Importing torch, transformers' model classes and Ray builds ~400k long-lived objects, and the
collector walks all of them again at every full collection the allocations trigger on the way: six
in a worker's imports, ~0.7 s of their ~4.4 s of CPU on this project's 2-core machines (measured
with `time.process_time()` around `import ray, verl_lite.workers.actor_rollout_ref`, collector on
and off). An import makes no garbage cycles worth collecting, so those collections find nothing.

The pause is for verl_lite's own processes only, from the moment `verl_lite` is imported to where
their code starts: the driver of `python -m verl_lite.main_ppo` (resumed in main_ppo.run once the
libraries are in) and the Ray workers of a worker group (the group sets PAUSE_ENV in their
environment; Worker.__init__ resumes and removes it, so a process the worker starts does not
inherit it). A process that imports verl_lite otherwise (a user's script, the tests) is untouched,
and a collector its user turned off stays off.

On resuming, one collection, then `gc.freeze()`: the ~400k objects the imports built move to the
collector's permanent generation, so no later full collection walks them again. The interpreter's
teardown at exit walks them all once more (~1.5 s of a driver's exit with the libraries imported,
2.7 s after a run, on these machines); left frozen, their cycles would never be freed, which
nanobind's leak check (triton's bindings, imported by torch._dynamo) reports at exit, so an atexit
handler unfreezes them first (a Ray worker's teardown, stopped by Ray, costs what it did). The
driver ends with `exit_now` instead: the atexit handlers, the log handlers, the standard streams
and every open file flushed, then os._exit, without the teardown. A demo CLI run (2 workers, 2 steps, read through a
pipe as the tests do, against the code before, alternating): 39.0 s -> 31.1 s of wall (x0.80), the
driver's CPU x0.80, its peak memory unchanged at 628 MiB (`farm-bench --vs`, 3 pairs; the collection
before the freeze keeps import-time garbage from being frozen, and exit_now's walk leaves the frozen
objects out: each cost 13-17 MiB of peak without).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import logging
import os
import sys
from typing import NoReturn

PAUSE_ENV = "VERL_LITE_PAUSE_GC_FOR_IMPORTS"
DRIVER = ["-m", "verl_lite.main_ppo"]

_paused = False
paused_for_imports = False  # this process's imports ran with the collector paused (for tests)
froze = False  # resume() froze the imports' objects: end the process with exit_now


def pause_for_imports() -> None:
    """Called by `verl_lite/__init__.py`: pause the collector in a driver or worker process."""
    global _paused, paused_for_imports
    entry = os.environ.get(PAUSE_ENV) == "1" or getattr(sys, "orig_argv", [])[1:3] == DRIVER
    if entry and gc.isenabled():
        gc.disable()
        _paused = paused_for_imports = True


def resume() -> None:
    """The imports are done: the collector runs again (if this module paused it)."""
    global _paused, froze
    os.environ.pop(PAUSE_ENV, None)
    if _paused:
        _paused = False
        gc.enable()
        gc.collect()
        gc.freeze()  # the imports' objects: never garbage, never walked again during the run
        atexit.register(gc.unfreeze)  # a worker's teardown frees them as before (exit_now skips it)
        froze = True


@contextlib.contextmanager
def later_imports():
    """A library a process imports once its code has started (vLLM, in the rollout's build), treated
    as its first imports were: collector paused while it imports, then one collection and a freeze,
    so the full collections that follow (vLLM makes five building its engine) do not walk what it
    built. The freeze takes every object alive then, as vLLM's own does a moment later (EngineCore's
    freeze_gc_heap, once its engine is built): nothing stays out of collection that vLLM would not
    keep out anyway. Only where resume() froze the first imports; elsewhere (a user's script, the
    tests) the collector is left alone."""
    if not froze or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()
        gc.freeze()


def exit_now(code) -> None:
    """End the process as sys.exit(code) would (None: 0, a number: itself, else printed and 1). Where
    resume() froze the imports: the atexit handlers run, then `end` (logging shut down, open files
    flushed, os._exit), without the interpreter's teardown (this module's docstring)."""
    if not froze:
        sys.exit(code)
    status = exit_status(code)
    atexit.unregister(gc.unfreeze)  # no teardown follows: the frozen imports stay out of end's walk
    atexit._run_exitfuncs()
    end(status)


def end(status: int) -> NoReturn:
    """os._exit(status) after what the interpreter's teardown would have done for the run's output:
    logging shut down, the standard streams flushed (created before any freeze, so not in the walk
    below) and every other open file the collector tracks flushed (a reward function's log file left
    open; where resume() froze the imports, files opened after it)."""
    logging.shutdown()
    streams = [sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__]
    for generation in range(3):
        streams += [obj for obj in gc.get_objects(generation) if issubclass(type(obj), io.IOBase)]
    for stream in streams:  # by its type above: a lazy proxy's __class__ may raise
        try:
            if stream is not None and not stream.closed:
                stream.flush()
        except Exception:  # a pipe whose reader is gone, a detached buffer: the exit goes on
            pass
    os._exit(status)


def exit_status(code) -> int:
    """The status sys.exit(code) ends with (None: 0, a number: itself, anything else: printed, then 1),
    for a process that ends with os._exit."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1
