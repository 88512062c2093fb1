"""verl's SandboxFusionTool against a real local HTTP server speaking SandboxFusion's /run_code API:
verl's request, verl's reading of the response, the refusal when nothing answers, and no
model-written code on this machine unless `run_code_locally: true` says so."""

import asyncio
import logging

import pytest

from tests.helpers.agent import schema
from tests.helpers.sandbox_server import SandboxServer, closed_url, finished
from verl_lite.tools import local_sandbox, sandbox_api
from verl_lite.tools.sandbox_fusion import SandboxFusionTool
from verl_lite.tools.schema import ToolSchema

SCHEMA = ToolSchema.from_dict(schema("code_interpreter", {"code": "c"}))


def tool(**config) -> SandboxFusionTool:
    return SandboxFusionTool({"type": "native", **config}, SCHEMA)


def call(t: SandboxFusionTool, *parameters: dict) -> list:
    """Each call's (text or the exception it raised), all concurrently, on one event loop."""

    async def calls():
        instance, _ = await t.create()
        results = await asyncio.gather(*(t.execute(instance, p) for p in parameters), return_exceptions=True)
        await t.release(instance)
        return [r if isinstance(r, BaseException) else r[0].text for r in results]

    return asyncio.run(calls())


@pytest.fixture
def no_local_runs(monkeypatch):
    """Fails the test if any model-written code is started on this machine."""

    def refuse(*args, **kwargs):
        raise AssertionError("model-written code ran on the host")

    monkeypatch.setattr(local_sandbox, "run_python", refuse)


def test_a_call_sends_verls_request_and_tells_stdout_then_stderr(no_local_runs):
    respond = lambda p: (200, finished(stdout="42\n", stderr="warn\n"))  # noqa: E731
    with SandboxServer(respond) as server:
        (text,) = call(tool(sandbox_fusion_url=server.url), {"code": "print(6 * 7)"})
    assert text == "42\nwarn\n"
    assert server.requests == [
        {
            "compile_timeout": 30,
            "run_timeout": 30,
            "code": "print(6 * 7)",
            "stdin": None,
            "memory_limit_MB": 1024,
            "language": "python",
            "files": {},
            "fetch_files": [],
        }
    ]


def test_every_outcome_reads_as_verl_reads_it(no_local_runs):
    outcomes = {
        "exit1": finished(stdout="partial\n", stderr="Traceback ...\n", return_code=1),  # Finished: told
        "slow": {"status": "Failed", "compile_result": None, "run_result": {"status": "TimeLimitExceeded"}},
        "compile": {
            "status": "Failed",
            "compile_result": {"status": "Error", "stderr": "e"},
            "run_result": None,
        },
        "sandbox": {"status": "SandboxError", "message": "pod died", "run_result": None},
    }
    with SandboxServer(lambda p: (200, outcomes[p["code"]])) as server:
        texts = call(tool(sandbox_fusion_url=server.url), *({"code": c} for c in outcomes))
    assert texts == ["partial\nTraceback ...\n", "no stdout here", "no stdout here", "no stdout here"]


def test_the_models_language_is_sent_and_its_timeout_honoured_only_below_the_default(no_local_runs):
    with SandboxServer() as server:
        texts = call(
            tool(sandbox_fusion_url=server.url, default_timeout=20, memory_limit_mb=256),
            {"code": "echo hi", "language": "bash", "timeout": 5},
            {"code": "x", "timeout": 600},
            {"code": "x", "language": "cobol"},
        )
    sent = sorted(
        (r["language"], r["run_timeout"], r["compile_timeout"], r["memory_limit_MB"]) for r in server.requests
    )
    assert sent == [("bash", 5, 5, 256), ("python", 20, 20, 256)]  # cobol is never sent
    assert texts[0] == "ran bash: echo hi\n" and texts[2].startswith("language 'cobol' is not available here")


def test_a_gateway_timeout_is_retried_as_in_verl_and_other_failures_are_the_calls_error(monkeypatch):
    monkeypatch.setattr(sandbox_api, "RETRY_DELAY_S", 0)
    answers = iter([(504, {}), (504, {}), (200, finished(stdout="ok\n"))])
    with SandboxServer(lambda p: next(answers)) as server:
        assert call(tool(sandbox_fusion_url=server.url), {"code": "x"}) == ["ok\n"]
        assert len(server.requests) == 3
        server.respond = lambda p: (500, {"detail": "boom"})
        (error,) = call(tool(sandbox_fusion_url=server.url), {"code": "x"})
    assert isinstance(error, sandbox_api.SandboxAPIError) and len(server.requests) == 4  # 500: no retry
    assert str(error) == f"the sandbox at {server.url} answered HTTP 500 Internal Server Error"


def test_at_most_min_workers_and_rate_limit_calls_are_in_flight(no_local_runs):
    with SandboxServer(delay_s=0.2) as server:
        call(
            tool(sandbox_fusion_url=server.url, num_workers=2, rate_limit=10),
            *({"code": str(i)} for i in range(6)),
        )
    assert len(server.requests) == 6 and server.max_in_flight == 2


@pytest.mark.parametrize(
    "config, fragment",
    [
        ({}, "config.sandbox_fusion_url is not set: give the URL of a SandboxFusion /run_code endpoint"),
        (
            {"sandbox_fusion_url": "{closed}"},
            "config.sandbox_fusion_url='{closed}' cannot be reached (Connection",
        ),
        (
            {"sandbox_fusion_url": "{wrong_path}"},
            "answers HTTP 404 Not Found to GET and POST: no /nope endpoint there",
        ),
        ({"sandbox_fusion_url": "sandbox:8080/run_code"}, "is not an http:// or https:// URL"),
        ({"run_code_locally": "yes"}, "config.run_code_locally='yes' must be true or false"),
        ({"default_language": "cobol", "sandbox_fusion_url": "{url}"}, "config.default_language='cobol': "),
        ({"default_language": "java", "run_code_locally": True}, "the local sandbox runs python only"),
        ({"sandbox_url": "{url}"}, "config has keys ['sandbox_url'] the sandbox tool does not read"),
    ],
)
def test_a_sandbox_that_does_not_answer_is_refused_when_built_naming_the_url_and_the_fix(
    config, fragment, no_local_runs
):
    with SandboxServer() as server:
        fill = {
            "closed": closed_url(),
            "url": server.url,
            "wrong_path": server.url.replace("run_code", "nope"),
        }
        config = {k: v.format(**fill) if isinstance(v, str) else v for k, v in config.items()}
        with pytest.raises(ValueError) as info:
            tool(**config)
    message = str(info.value)
    assert fragment.format(**fill) in message and "\n" not in message, message
    if "sandbox_fusion_url=" in fragment or "not set" in fragment:
        assert "or set config.run_code_locally=true" in message
    assert server.requests == []  # the probe is a GET (and a POST only where the GET gets 404): no code runs


def test_run_code_locally_runs_here_says_so_once_and_contacts_no_url(caplog):
    with SandboxServer() as server, caplog.at_level(logging.INFO, logger="verl_lite.tools"):
        t = tool(sandbox_fusion_url=server.url, run_code_locally=True)
        texts = call(t, {"code": "print(1 + 1)"}, {"code": "print(2)", "language": "bash"})
    assert texts == ["2\n", "language 'bash' is not available here: only python"]
    assert server.requests == [] and server.gets == 0
    (said,) = [r.getMessage() for r in caplog.records if "run_code_locally" in r.getMessage()]
    assert said.startswith(
        "code_interpreter: config.run_code_locally=true: the model's Python runs on this machine"
    )
    assert f"sandbox_fusion_url {server.url!r} is not contacted" in said and "not a security sandbox" in said
    network = "no network (a namespace of its own)" if local_sandbox.network_closed() else "Python audit hook"
    assert network in said


def test_a_gateway_that_answers_get_with_404_is_probed_with_an_empty_program(no_local_runs):
    """Some API gateways route POST only: a 404 to the GET is not a refusal when a POST is answered."""
    with SandboxServer() as server:
        server.get_status = 404
        t = tool(sandbox_fusion_url=server.url, default_language="cpp")
        assert call(t, {"code": "int main() {}"}) == ["ran cpp: int main() {}\n"]
    assert server.gets == 1 and [(r["code"], r["language"]) for r in server.requests] == [
        ("", "cpp"),
        ("int main() {}", "cpp"),
    ]
