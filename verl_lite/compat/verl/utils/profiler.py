"""verl.utils.profiler: `simple_timer`, which verl's agent loops time their generations and tool
turns with (seconds added into a dict under a name). verl's other profilers are not provided.

Written here, not re-exported: the trainer's timer (trainer/metrics.py) sits above compat/, and
verl's timer records only a block that returns (one that raises adds nothing), which this keeps.
"""

import time
from contextlib import contextmanager


@contextmanager
def simple_timer(name: str, timing_raw: dict[str, float]):
    start = time.perf_counter()
    yield
    timing_raw[name] = timing_raw.get(name, 0) + time.perf_counter() - start


__all__ = ["simple_timer"]
