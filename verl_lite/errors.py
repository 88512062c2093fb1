"""Failures while training, reported as one line `verl_lite: ...` with exit status 2.

RunError    a failure while training (a reward function that raises or hangs, a worker that dies,
            a phase that fails). It names the step, the phase and what failed (rank, file, row,
            data_source); `detail` keeps the long form (a remote traceback) for the log.

Bad input found at start-up, before Ray, is config/errors.py's ConfigError (one line per problem,
raised by verl_lite/preflight.py); main_ppo reports both the same way. RunError lives here, below
every package, so any module can raise it.
"""

from __future__ import annotations


class RunError(RuntimeError):
    """A failure while running, summarised in one line; `detail` holds what the log should keep."""

    def __init__(self, message: str, detail: str = ""):
        self.detail = detail
        super().__init__(one_line(message))


def one_line(text: str, limit: int = 600) -> str:
    """`text` on one line: newlines and runs of whitespace become single spaces, cut at `limit`."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
