"""Python's cyclic garbage collector paused while a verl_lite process imports its libraries.

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
"""

from __future__ import annotations

import gc
import os
import sys

PAUSE_ENV = "VERL_LITE_PAUSE_GC_FOR_IMPORTS"
DRIVER = ["-m", "verl_lite.main_ppo"]

_paused = False
paused_for_imports = False  # this process's imports ran with the collector paused (for tests)


def pause_for_imports() -> None:
    """Called by `verl_lite/__init__.py`: pause the collector in a driver or worker process."""
    global _paused, paused_for_imports
    entry = os.environ.get(PAUSE_ENV) == "1" or getattr(sys, "orig_argv", [])[1:3] == DRIVER
    if entry and gc.isenabled():
        gc.disable()
        _paused = paused_for_imports = True


def resume() -> None:
    """The imports are done: the collector runs again (if this module paused it)."""
    global _paused
    os.environ.pop(PAUSE_ENV, None)
    if _paused:
        _paused = False
        gc.enable()
