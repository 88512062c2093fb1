"""The program the local sandbox's child process runs (tools/local_sandbox.py): untrusted Python
from stdin, under limits.

    python -I -u sandbox_child.py <memory_mb> <cpu_seconds> <file_bytes>   (code on stdin)

Standard library only, run as a script (not imported by verl_lite). In order:
  1. read the code from stdin;
  2. resource limits: address space (memory_mb), CPU time (the kernel kills at cpu_seconds), size of
     any file written, and no new processes (RLIMIT_NPROC 0 for this user);
  3. a new user and network namespace (`unshare`), where the kernel allows unprivileged ones: the
     process then has no network interface at all;
  4. an audit hook that refuses sockets, process creation and ctypes' foreign calls, for machines
     without namespaces and as a second layer;
  5. the code runs as `__main__`; its stdout and stderr go to the parent.
What this does not isolate is listed in docs/multi_turn.md (files, the parent's environment, ...).
"""

import ctypes
import resource
import sys

CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
BLOCKED_EVENTS = ("socket.", "subprocess.", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork")
BLOCKED_EVENTS += ("os.forkpty", "pty.spawn", "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function")


def _limit(kind: int, value: int) -> None:
    soft, hard = resource.getrlimit(kind)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (value, value))


def _no_network() -> bool:
    """A fresh network namespace (no interfaces), if unprivileged user namespaces are allowed."""
    try:
        return ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0
    except (OSError, AttributeError):
        return False


def _audit(event: str, args) -> None:
    if event.startswith(BLOCKED_EVENTS):
        raise PermissionError(f"the code interpreter does not allow {event}")


def main() -> None:
    memory_mb, cpu_seconds, file_bytes = (int(a) for a in sys.argv[1:4])
    code = sys.stdin.read()
    _limit(resource.RLIMIT_AS, memory_mb * 1024 * 1024)
    _limit(resource.RLIMIT_CPU, cpu_seconds)
    _limit(resource.RLIMIT_FSIZE, file_bytes)
    _no_network()
    _limit(resource.RLIMIT_NPROC, 0)
    sys.addaudithook(_audit)
    sys.argv = ["<code>"]
    try:
        exec(compile(code, "<code>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit:
        raise
    except BaseException as e:  # the user's traceback, without this runner's frames
        import traceback

        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != __file__]
        if frames:
            sys.stderr.write("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)))
        sys.stderr.write("".join(traceback.format_exception_only(type(e), e)))
        sys.exit(1)


if __name__ == "__main__":
    main()
