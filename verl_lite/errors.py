"""The two kinds of error a user sees, both reported as one line `verl_lite: ...` with exit status 2.

InputError  bad input found at start-up, before Ray: a config value, a file, a model folder, a
            checkpoint. It names the key or file (and row), the value and the fix.
RunError    a failure while training (a reward function that raises or hangs, a worker that dies,
            a phase that fails). It names the step, the phase and what failed (rank, file, row,
            data_source); `detail` keeps the long form (a remote traceback) for the log.

Both live here, below every package, so any module can raise them and main_ppo reports them the
same way.
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
