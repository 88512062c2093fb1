"""verl's `SandboxFusionTool` (schema name `code_interpreter`): the model's code is sent to the
SandboxFusion service at `sandbox_fusion_url` (tools/sandbox_api.py), as verl does.

verl's config keys, with verl's defaults: sandbox_fusion_url (required), num_workers (10),
enable_global_rate_limit (true), rate_limit (10), default_timeout (30 s), default_language
("python"), memory_limit_mb (1024). verl 0.9.1 no longer ships the class; its behaviour here is
that of verl's last one (verl-project/verl verl/tools/sandbox_fusion_tools.py): a run that finished
tells the model its stdout and stderr, any other outcome "no stdout here".

Where verl_lite differs, on purpose:
  - the tool is refused when it is built (so before Ray, by the start-up check that builds every
    tool) if nothing answers at the URL: a run would otherwise fail every call it makes;
  - a sandbox that gives no response mid-run is an error of that call (the model reads it; the
    rollout counts it in tool_errors), not a silent "no stdout here";
  - the model's own `timeout` argument is honoured only below default_timeout;
  - at most min(num_workers, rate_limit) calls run at once per worker (num_workers alone when
    enable_global_rate_limit is false); verl's limit is one Ray actor for the whole cluster.

`run_code_locally: true` (verl_lite's key; verl ignores it) runs Python on this machine instead, in
a limited child process (tools/local_sandbox.py), and says so once when the tool is built; the URL
is then not contacted. Without that key no model-written code runs on the host.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid

from verl_lite.tools import local_sandbox, sandbox_api
from verl_lite.tools.base import BaseTool, ToolResponse, refuse_unread_keys

log = logging.getLogger(__name__)

LOCAL_KEY = "run_code_locally"
CONFIG_KEYS = (
    "sandbox_fusion_url",
    "num_workers",
    "enable_global_rate_limit",
    "rate_limit",
    "default_timeout",
    "default_language",
    "memory_limit_mb",
    LOCAL_KEY,
)
DOCS = "docs/multi_turn.md, 'The code sandbox'"


class SandboxFusionTool(BaseTool):
    def __init__(self, config: dict, tool_schema):
        refuse_unread_keys(config, CONFIG_KEYS, "sandbox tool")
        super().__init__(config, tool_schema)
        self.language = config.get("default_language", "python")
        self.timeout_s = _positive(config.get("default_timeout", 30), "default_timeout", float)
        self.memory_mb = _positive(config.get("memory_limit_mb", 1024), "memory_limit_mb", int)
        workers = _positive(config.get("num_workers", 10), "num_workers", int)
        rate = _positive(config.get("rate_limit", 10), "rate_limit", int)
        limited = config.get("enable_global_rate_limit", True)
        self._slots = threading.BoundedSemaphore(min(workers, rate) if limited else workers)
        self.url = config.get("sandbox_fusion_url") or ""
        local = config.get(LOCAL_KEY, False)
        if not isinstance(local, bool):
            raise ValueError(f"config.{LOCAL_KEY}={local!r} must be true or false")
        self._run = self._run_locally if local else self._run_remotely  # chosen once, here
        self.languages = ("python",) if local else sandbox_api.LANGUAGES
        if self.language not in self.languages:
            where = (
                "the local sandbox runs python only"
                if local
                else f"SandboxFusion runs {list(self.languages)}"
            )
            raise ValueError(f"config.default_language={self.language!r}: {where}")
        if local:
            self._announce()
        else:
            self._check_url()
        self._instances: set[str] = set()

    def _check_url(self) -> None:
        if not self.url:
            raise ValueError(
                f"config.sandbox_fusion_url is not set: give the URL of a SandboxFusion /run_code endpoint, "
                f"or set config.{LOCAL_KEY}=true to run the model's code on this machine ({DOCS})"
            )
        problem = sandbox_api.probe(self.url, self.language)
        if problem:
            raise ValueError(
                f"config.sandbox_fusion_url={self.url!r} {problem}; start SandboxFusion there or fix the URL, "
                f"or set config.{LOCAL_KEY}=true to run the model's code on this machine ({DOCS})"
            )

    def _announce(self) -> None:
        network = (
            "no network (a namespace of its own)"
            if local_sandbox.network_closed()
            else "network refused only by a Python audit hook (this kernel allows no user namespaces)"
        )
        unused = f"; sandbox_fusion_url {self.url!r} is not contacted" if self.url else ""
        log.info(
            "%s: config.%s=true: the model's Python runs on this machine, in a child process with its own "
            "session, CPU/memory/file/process limits, %s and a throwaway folder; not a security sandbox "
            "(%s)%s",
            self.name,
            LOCAL_KEY,
            network,
            DOCS,
            unused,
        )

    async def create(self, instance_id: str | None = None, **kwargs) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid.uuid4())
        self._instances.add(instance_id)
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict, **kwargs):
        code = parameters.get("code", "")
        code = code if isinstance(code, str) else str(code)
        language = parameters.get("language", self.language)
        if language not in self.languages:
            told = f"language {language!r} is not available here: only {', '.join(self.languages)}"
            return ToolResponse(text=told), None, None
        timeout_s = self.timeout_s
        asked = parameters.get("timeout")
        if isinstance(asked, (int, float)) and not isinstance(asked, bool) and 0 < asked < timeout_s:
            timeout_s = float(asked)
        text = await asyncio.to_thread(self._call, code, language, timeout_s)
        return ToolResponse(text=text), None, None

    def _call(self, code: str, language: str, timeout_s: float) -> str:
        with self._slots:
            return self._run(code, language, timeout_s)

    def _run_remotely(self, code: str, language: str, timeout_s: float) -> str:
        return sandbox_api.tool_text(
            sandbox_api.run_code(self.url, code, language, timeout_s, self.memory_mb)
        )

    def _run_locally(self, code: str, language: str, timeout_s: float) -> str:
        return local_sandbox.run_python(code, timeout_s, self.memory_mb).text

    async def release(self, instance_id: str, **kwargs) -> None:
        self._instances.discard(instance_id)


def _positive(value, name: str, kind):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"config.{name}={value!r} must be a number > 0")
    return kind(value)
