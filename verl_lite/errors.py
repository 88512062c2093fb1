"""The errors a user sees as one line `verl_lite: ...` with exit status 2.

InputError  bad input found outside the config's own start-up checks (e.g. the memory planner
            reading a model folder): it names the key or file, the value and the fix.
RunError    a failure while training (a reward function that raises or hangs, a worker that dies,
            a phase that fails). It names the step, the phase and what failed (rank, file, row,
            data_source); `detail` keeps the long form (a remote traceback) for the log.

Bad input found at start-up, before Ray, is config/errors.py's ConfigError (one line per problem,
raised by verl_lite/preflight.py); main_ppo reports them all the same way. These live here, below
every package but config, so any module can raise them.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input found before any worker starts. `problems` lists one line per problem."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        many = "invalid input:" + "".join(f"\n  - {p}" for p in self.problems)
        super().__init__(self.problems[0] if len(self.problems) == 1 else many)


class RunError(RuntimeError):
    """A failure while running, summarised in one line; `detail` holds what the log should keep."""

    def __init__(self, message: str, detail: str = ""):
        self.detail = detail
        super().__init__(one_line(message))


def one_line(text: str, limit: int = 600) -> str:
    """`text` on one line: newlines and runs of whitespace become single spaces, cut at `limit`."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
