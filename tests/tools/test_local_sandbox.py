"""The local sandbox (opt-in: `run_code_locally: true`): each call a limited child process. Every
limit is hit for real."""

import asyncio
import os
import time

from tests.helpers.agent import schema
from verl_lite.tools.local_sandbox import OUTPUT_LIMIT_BYTES, run_python
from verl_lite.tools.sandbox_fusion import SandboxFusionTool
from verl_lite.tools.schema import ToolSchema


def test_runs_python_and_returns_stdout_and_stderr():
    result = run_python("import sys\nprint(6 * 7)\nprint('warn', file=sys.stderr)", 10, 512)
    assert result.status == "finished" and result.returncode == 0
    assert result.text == "42\nwarn\n"


def test_errors_come_back_as_the_users_traceback():
    text = run_python("def f():\n    return 1 / 0\nf()", 10, 512).text
    assert text.startswith("Traceback") and 'File "<code>", line 2, in f' in text
    assert text.rstrip().endswith("ZeroDivisionError: division by zero") and "sandbox_child" not in text


def test_wall_time_limit_kills_the_process_group():
    start = time.monotonic()
    result = run_python("import time\ntime.sleep(60)", 1.0, 512)
    assert result.status == "timeout" and time.monotonic() - start < 30
    assert result.text.endswith("[stopped: the code ran past its time limit]")


def test_cpu_time_limit():
    result = run_python("while True:\n    pass", 2.0, 512)  # the kernel's RLIMIT_CPU (2 s) or the wall limit
    assert result.status in ("signal", "timeout")


def test_memory_limit():
    text = run_python("x = bytearray(4 * 1024 ** 3)\nprint('allocated')", 10, 256).text
    assert "MemoryError" in text and "allocated" not in text


def test_no_network_and_no_processes():
    for code, event in [
        ("import socket\nsocket.create_connection(('127.0.0.1', 9))", "socket."),
        ("import socket\nsocket.socket()", "socket."),
        ("import os\nos.system('echo hi')", "os.system"),
        ("import subprocess\nsubprocess.run(['echo', 'hi'])", "subprocess.Popen"),
        ("import os\nos.fork()", "os.fork"),
        ("import ctypes\nctypes.CDLL(None)", "ctypes.dlopen"),
    ]:
        text = run_python(code, 10, 512).text
        assert "PermissionError: the code interpreter does not allow" in text and event in text, (code, text)


def test_output_is_capped_and_the_environment_not_inherited():
    result = run_python("print('x' * 10**6)", 10, 512)
    assert result.status == "output_limit" and len(result.output) == OUTPUT_LIMIT_BYTES
    os.environ["VERL_LITE_TEST_SECRET"] = "s3cret"
    try:
        text = run_python("import os\nprint(sorted(os.environ))\nprint(os.getcwd())", 10, 512).text
    finally:
        del os.environ["VERL_LITE_TEST_SECRET"]
    assert "VERL_LITE_TEST_SECRET" not in text and "verl_lite_code_" in text


def test_the_tool_follows_verls_call_and_caps_the_models_timeout():
    tool = SandboxFusionTool(
        {"type": "native", "default_timeout": 2, "memory_limit_mb": 256, "run_code_locally": True},
        ToolSchema.from_dict(schema("code_interpreter", {"code": "c"})),
    )

    async def calls():
        instance, _ = await tool.create()
        ok = await tool.execute(instance, {"code": "print(1 + 1)"})
        other = await tool.execute(instance, {"code": "print(1)", "language": "bash"})
        start = time.monotonic()
        slow = await tool.execute(instance, {"code": "import time\ntime.sleep(30)", "timeout": 600})
        await tool.release(instance)
        return ok, other, slow, time.monotonic() - start

    ok, other, slow, seconds = asyncio.run(calls())
    assert ok == (ok[0], None, None) and ok[0].text == "2\n"
    assert other[0].text == "language 'bash' is not available here: only python"
    assert "time limit" in slow[0].text and seconds < 20  # the model's 600 s capped at default_timeout=2
