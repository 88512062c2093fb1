"""Running a user's code (model.external_lib, a reward file, tool, interaction and agent-loop classes):
what ends the process and what never returns become one-line errors naming the code.

`sys.exit()` raises SystemExit, which derives from BaseException, so an `except Exception` around
a user's import or constructor lets it through, and a CLI run then ends with the user's status
(often 0) and no word of why. `exits_as_errors` (every site that runs a user's code uses it) turns
it into an error of the caller's type (UserCodeExit, a ValueError, unless told) that says which
code did it and where its file is. KeyboardInterrupt is not converted: a real Ctrl-C must stop
the run as Ctrl-C, not be blamed on the user's code.

`call_with_deadline` runs a synchronous call (a constructor) in a daemon thread and waits at most
its deadline: a constructor that blocks costs that many seconds and an error naming it, never a
hang (the blocked thread cannot be stopped from Python; being a daemon, it never holds the process).
"""

from __future__ import annotations

import importlib.util
import inspect
import threading
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

PROCESS_EXITS = (SystemExit,)  # KeyboardInterrupt propagates: it is a real Ctrl-C far more often


class UserCodeExit(ValueError):
    """A user's code raised SystemExit where it was imported, built or called."""


class UserCodeTimeout(ValueError):
    """A call into a user's code did not return within its deadline."""


def describe_exit(e: BaseException) -> str:
    """`called sys.exit(0)` (any other BaseException: `raised <its type>`)."""
    if isinstance(e, SystemExit):
        return f"called sys.exit({e.code!r})"
    return f"raised {type(e).__name__}"


def file_of(obj: Any) -> str | None:
    """The source file of a class, function or module object, or of a module named by a string."""
    if isinstance(obj, str):
        try:  # a dotted name imports its parents, which may be the code that exits
            spec = importlib.util.find_spec(obj)
        except BaseException:
            return None
        return spec.origin if spec is not None else None
    try:
        return inspect.getsourcefile(obj)
    except TypeError:
        return None


@contextmanager
def exits_as_errors(
    what: str,
    obj: Any = None,
    *,
    after: str = "",
    ends: str = "the run",
    fix: str = "raise an exception instead to report a problem",
    error: type[Exception] = UserCodeExit,
):
    """The body's SystemExit as `error`: "<what> (<file>) called sys.exit(0)<after>, which would end
    <ends>; <fix>". `obj`: the class, module or module name whose file is named (none: no file)."""
    try:
        yield
    except PROCESS_EXITS as e:
        where = file_of(obj) if obj is not None else None
        raise error(
            f"{what}{f' ({where})' if where else ''} {describe_exit(e)}{after}, which would end {ends}; {fix}"
        ) from None


def call_with_deadline(fn: Callable, seconds: float | None, what: str, key: str) -> Any:
    """`fn()` in a daemon thread, waited for at most `seconds` (None: as long as it takes); its
    exceptions re-raised here, its exits as a UserCodeExit. UserCodeTimeout names `what` and the `key`
    that sets the deadline."""
    box: dict[str, Any] = {}

    def work():
        try:
            box["value"] = fn()
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=work, name="verl_lite-user-code", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise UserCodeTimeout(f"{what} did not return within {seconds:g} s ({key}); fix it or raise {key}")
    if "error" in box:
        error = box["error"]
        if isinstance(error, PROCESS_EXITS):
            raise UserCodeExit(f"{what} {describe_exit(error)}, which would end the run") from None
        raise error
    return box["value"]
