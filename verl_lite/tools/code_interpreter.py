"""A local code interpreter: verl's `SandboxFusionTool` (schema name `code_interpreter`) without the
remote sandbox service.

Each call runs the model's Python in a fresh child process (sandbox_child.py) with:
  - a wall-time limit (`default_timeout` seconds, or the call's own `timeout` argument when lower),
    after which the child's whole process group is killed;
  - the same number of seconds of CPU time, and an address-space limit of `memory_limit_mb`;
  - no network (a network namespace without interfaces where the kernel allows it, and an audit
    hook refusing sockets), no child processes, files written only up to 16 MiB;
  - an empty working folder of its own (deleted afterwards) and an environment holding only PATH,
    HOME and the locale, so the trainer's secrets (API keys in its environment) are not inherited;
  - its output (stdout and stderr, interleaved) read up to 64 KiB; the loop then truncates it to
    `multi_turn.max_tool_response_length` as for any tool.
At most min(num_workers, rate_limit) programs run at once on a worker (num_workers alone when
enable_global_rate_limit is false); `sandbox_fusion_url` is accepted and not contacted.
docs/multi_turn.md says what this does not isolate.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass

from verl_lite.tools.base import BaseTool, ToolResponse, refuse_unread_keys

log = logging.getLogger(__name__)

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_child.py")
CONFIG_KEYS = (
    "type",
    "sandbox_fusion_url",
    "num_workers",
    "enable_global_rate_limit",
    "rate_limit",
    "default_timeout",
    "default_language",
    "memory_limit_mb",
)
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


class CodeInterpreterTool(BaseTool):
    def __init__(self, config: dict, tool_schema):
        refuse_unread_keys(config, CONFIG_KEYS, "code interpreter")
        super().__init__(config, tool_schema)
        self.language = config.get("default_language", "python")
        if self.language != "python":
            raise ValueError(
                f"config.default_language={self.language!r}: the local code interpreter runs python only"
            )
        self.timeout_s = _positive(config.get("default_timeout", 30), "default_timeout", float)
        self.memory_mb = _positive(config.get("memory_limit_mb", 1024), "memory_limit_mb", int)
        workers = _positive(config.get("num_workers", 10), "num_workers", int)
        rate = _positive(config.get("rate_limit", 10), "rate_limit", int)
        limited = config.get("enable_global_rate_limit", True)
        self._slots = threading.BoundedSemaphore(min(workers, rate) if limited else workers)
        if config.get("sandbox_fusion_url"):
            log.info(
                "code_interpreter: runs Python locally (tools/code_interpreter.py); sandbox_fusion_url is not contacted"
            )
        self._instances: set[str] = set()

    async def create(self, instance_id: str | None = None, **kwargs) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid.uuid4())
        self._instances.add(instance_id)
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict, **kwargs):
        code = parameters.get("code", "")
        code = code if isinstance(code, str) else str(code)
        language = parameters.get("language", self.language)
        if language != "python":
            return ToolResponse(text=f"language {language!r} is not available here: only python"), None, None
        timeout_s = self.timeout_s
        asked = parameters.get("timeout")
        if isinstance(asked, (int, float)) and not isinstance(asked, bool) and 0 < asked < timeout_s:
            timeout_s = float(asked)
        result = await asyncio.to_thread(self._run, code, timeout_s)
        return ToolResponse(text=result.text), None, None

    def _run(self, code: str, timeout_s: float) -> RunResult:
        with self._slots:
            return run_python(code, timeout_s, self.memory_mb)

    async def release(self, instance_id: str, **kwargs) -> None:
        self._instances.discard(instance_id)


def _positive(value, name: str, kind):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"config.{name}={value!r} must be a number > 0")
    return kind(value)
