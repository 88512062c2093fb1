"""SandboxFusion's HTTP API as verl calls it: one POST of JSON to the configured `/run_code` URL.

The contract is verl 0.9.1's `verl/utils/reward_score/sandbox_fusion/utils.py` (call_sandbox_api):

    request  {"code", "language", "stdin", "compile_timeout", "run_timeout", "memory_limit_MB",
              "files": {}, "fetch_files": []}
    response {"status": "Success" | "Failed" | "SandboxError", "compile_result": {...} | null,
              "run_result": {"status": "Finished" | "TimeLimitExceeded" | "Error", "stdout",
                             "stderr", "return_code", "execution_time"} | null, ...}

with verl's request timeout (compile + run + 10 s) and its retries: a 504 (Gateway Timeout) is
tried up to 3 times, 1 s then 2 s apart; any other failure ends the call. Standard library only
(urllib), so no HTTP package is added for it. `probe` is the start-up check that something
answers at the URL (tools/sandbox_fusion.py runs it when the tool is built).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

# verl's SUPPORTED_LANGUAGES (sandbox_fusion/utils.py): what it refuses to send. SandboxFusion's
# language names, one string (its "cuda" is a language to compile, not this process's device)
LANGUAGES = tuple(
    """python cpp nodejs go go_test java php csharp bash typescript sql rust cuda lua R perl D_ut ruby
    scala julia pytest junit kotlin_script jest verilog python_gpu lean swift racket""".split()
)
MAX_RETRIES, RETRY_DELAY_S, API_TIMEOUT_S = 3, 1, 10  # verl's values
PROBE_TIMEOUT_S = 5.0


class SandboxAPIError(RuntimeError):
    """The sandbox did not answer a call with a response: the message names the URL and why."""

    def __init__(self, message: str, http_status: int | None = None):
        super().__init__(message)
        self.http_status = http_status


def run_code(
    url: str, code: str, language: str, run_timeout: float, memory_limit_mb: int, stdin: str | None = None
) -> dict:
    """The sandbox's JSON response to running `code` (compile and run timeouts both `run_timeout`,
    as verl's tool sends them); SandboxAPIError when no response came."""
    seconds = int(run_timeout) if float(run_timeout).is_integer() else run_timeout  # as the YAML gave it
    payload = {
        "compile_timeout": seconds,
        "run_timeout": seconds,
        "code": code,
        "stdin": stdin,
        "memory_limit_MB": memory_limit_mb,
        "language": language,
        "files": {},
        "fetch_files": [],
    }
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
        method="POST",
    )
    for attempt in range(MAX_RETRIES):
        try:
            with urllib.request.urlopen(request, timeout=2 * run_timeout + API_TIMEOUT_S) as answer:
                body = answer.read()
        except urllib.error.HTTPError as e:
            if e.code == 504 and attempt < MAX_RETRIES - 1:
                time.sleep(RETRY_DELAY_S * (attempt + 1))
                continue
            raise SandboxAPIError(f"the sandbox at {url} answered HTTP {e.code} {e.reason}", e.code) from None
        except (urllib.error.URLError, OSError) as e:
            raise SandboxAPIError(f"the sandbox at {url} cannot be reached ({_reason(e)})") from None
        try:
            response = json.loads(body)
        except ValueError as e:
            raise SandboxAPIError(f"the sandbox at {url} answered with no JSON ({e})") from None
        if not isinstance(response, dict):
            raise SandboxAPIError(f"the sandbox at {url} answered {type(response).__name__}, not an object")
        return response
    raise AssertionError("unreachable: the last attempt returns or raises")


def tool_text(response: dict) -> str:
    """What verl's SandboxFusionTool tells the model: stdout then stderr of a run that finished
    (whatever its exit code), else 'no stdout here' (a compile error, a time limit, a sandbox error)."""
    run = response.get("run_result") or {}
    if run.get("status") == "Finished":
        return (run.get("stdout") or "") + (run.get("stderr") or "")
    return "no stdout here"


def probe(url: str, language: str = "python", timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why nothing usable answers at `url`, or None when something does. A GET runs no code: a
    SandboxFusion server answers it 405 (POST only), a gateway may answer 401/403 without a token,
    all fine. A 404 may be a gateway that routes POST only, so an empty program is then POSTed
    (run on the sandbox, not here); a 404 to that too means no such endpoint there. No answer at
    all means nothing listens."""
    if not url.startswith(("http://", "https://")):
        return "is not an http:// or https:// URL"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=timeout_s):
            return None
    except urllib.error.HTTPError as e:
        if e.code != 404:
            return None
    except (urllib.error.URLError, OSError, ValueError) as e:
        return f"cannot be reached ({_reason(e)})"
    try:
        run_code(url, "", language, timeout_s, 128)
    except SandboxAPIError as e:
        if e.http_status == 404:
            return f"answers HTTP 404 Not Found to GET and POST: no {_path(url)} endpoint there"
    return None


def _reason(e: Exception) -> str:
    reason = getattr(e, "reason", None) or e
    return f"{type(reason).__name__}: {reason}" if isinstance(reason, Exception) else str(reason)


def _path(url: str) -> str:
    return "/" + url.split("://", 1)[-1].split("/", 1)[-1] if "/" in url.split("://", 1)[-1] else "/"
