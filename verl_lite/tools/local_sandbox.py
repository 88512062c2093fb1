"""Running model-written Python on this machine: the opt-in local mode of the sandbox tool
(`run_code_locally: true` in its config; tools/sandbox_fusion.py), for a machine with no sandbox.

Each call runs the code in a fresh child process (sandbox_child.py) with:
  - its own session and process group; a wall-time limit, after which the whole group is killed;
  - the same number of seconds of CPU time, and an address-space limit of `memory_mb`;
  - no network (a network namespace without interfaces where the kernel allows unprivileged user
    namespaces, `network_closed` says whether it does; an audit hook refusing sockets everywhere),
    no child processes, files written only up to 16 MiB;
  - an empty working folder of its own (deleted afterwards) and an environment holding only PATH,
    HOME and the locale, so the trainer's secrets (API keys in its environment) are not inherited;
  - its output (stdout and stderr, interleaved) read up to 64 KiB; the loop then truncates it to
    `multi_turn.max_tool_response_length` as for any tool.
docs/multi_turn.md says what this does not isolate: it is not a security sandbox.
"""

from __future__ import annotations

import math
import os
import selectors
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_child.py")
OUTPUT_LIMIT_BYTES = 64 * 1024
FILE_LIMIT_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class RunResult:
    output: str  # stdout and stderr as the program wrote them (up to the output limit)
    status: str  # finished | timeout | output_limit | signal
    returncode: int | None

    @property
    def text(self) -> str:
        notes = {
            "timeout": "[stopped: the code ran past its time limit]",
            "output_limit": f"[stopped: the output passed {OUTPUT_LIMIT_BYTES} bytes]",
            "signal": f"[stopped by signal {-(self.returncode or 0)}: a CPU-time or resource limit]",
        }
        note = notes.get(self.status)
        return f"{self.output}\n{note}" if note else self.output


def _read_until(proc: subprocess.Popen, deadline_s: float, limit: int) -> tuple[bytes, str]:
    """The child's output until it closes it, the deadline passes or `limit` bytes came."""
    out, status = bytearray(), "finished"
    loop_start = _now()
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline_s - (_now() - loop_start)
            if left <= 0:
                status = "timeout"
                break
            if not sel.select(timeout=left):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            out += chunk
            if len(out) > limit:
                out, status = out[:limit], "output_limit"
                break
    return bytes(out), status


def _now() -> float:
    import time

    return time.monotonic()


def run_python(
    code: str, timeout_s: float, memory_mb: int, output_limit: int = OUTPUT_LIMIT_BYTES
) -> RunResult:
    """Run `code` in a limited child process (module docstring); blocks up to `timeout_s` seconds."""
    with tempfile.TemporaryDirectory(prefix="verl_lite_code_") as folder:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": folder, "LC_ALL": "C.UTF-8"}
        cmd = [
            sys.executable,
            "-I",
            "-u",
            CHILD,
            str(memory_mb),
            str(max(1, math.ceil(timeout_s))),
            str(FILE_LIMIT_BYTES),
        ]
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=folder,
            env=env,
            start_new_session=True,  # its own process group: a kill takes everything it started
        )
        try:
            proc.stdin.write(code.encode("utf-8", errors="replace"))
            proc.stdin.close()
        except BrokenPipeError:
            pass
        output, status = _read_until(proc, timeout_s, output_limit)
        if status != "finished":
            _kill(proc)
        returncode = proc.wait()
        proc.stdout.close()
    if status == "finished" and returncode < 0:
        status = "signal"
    return RunResult(output.decode("utf-8", errors="replace"), status, returncode)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@cache
def network_closed() -> bool:
    """Whether this kernel lets the child drop into a network namespace of its own (unprivileged
    user namespaces allowed); where not, only sandbox_child.py's audit hook refuses sockets."""
    probe = "import ctypes; print(ctypes.CDLL(None, use_errno=True).unshare(0x10000000 | 0x40000000))"
    try:
        out = subprocess.run(
            [sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=30, env={}
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return out.stdout.strip() == "0"
