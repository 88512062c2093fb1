"""Where output goes (utils/logs.py), in fresh processes: the driver's console shows verl_lite's
records and everybody's errors, its log file the rest; a routed worker's stdout and stderr, from
Python and from the OS level, land in its file, and only verl_lite's warnings and errors reach its
original stderr (which Ray forwards to the driver's console)."""

import os
import subprocess
import sys
import textwrap

from verl_lite.utils import logs

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

EMIT = """
import logging, os, sys, warnings
logging.getLogger("verl_lite.trainer").info("own info line")
logging.getLogger("verl_lite.reward").debug("own debug line")
logging.getLogger("verl_lite.engine").warning("own warning line")
logging.getLogger("somelib").warning("library warning line")
logging.getLogger("somelib").error("library error line")
library.info("library with its own handler")
warnings.warn("a deprecation notice", FutureWarning)
print("plain print line", flush=True)
os.write(2, b"os-level stderr line\\n")
"""


def _run(script: str, env: dict) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in (logs.LOG_DIR_ENV, logs.WORKER_LOG_ENV)}
    env = dict(base, PYTHONPATH=ROOT, **env)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)


def _library_with_own_handler() -> str:
    """A library logger printing on stderr through a handler of its own, as Ray's and transformers' do."""
    return textwrap.dedent("""
        import logging, sys
        library = logging.getLogger("ownhandlerlib")
        library.addHandler(logging.StreamHandler(sys.stderr))
        library.setLevel(logging.INFO)
        library.propagate = False
    """)


def test_driver_console_shows_own_records_and_errors_file_keeps_everything(tmp_path):
    script = (
        _library_with_own_handler()
        + textwrap.dedent(f"""
        from verl_lite.utils.logs import setup_driver_logging
        print(setup_driver_logging({str(tmp_path)!r}))
    """)
        + EMIT
    )
    proc = _run(script, {})
    assert proc.returncode == 0, proc.stderr
    console = proc.stdout + proc.stderr
    assert "own info line" in console and "WARNING: own warning line" in console
    assert "ERROR: library error line" in console
    for hidden in ("own debug line", "library warning line", "library with its own handler", "deprecation"):
        assert hidden not in console, hidden
    log = (tmp_path / logs.DRIVER_LOG).read_text()
    for line in (
        "own info line",
        "own debug line",
        "library warning line",
        "library error line",
        "library with its own handler",
        "a deprecation notice",
    ):
        assert line in log, line
    assert os.environ.get(logs.LOG_DIR_ENV) != str(tmp_path / "logs"), "the test process is untouched"


def test_worker_output_goes_to_its_file_and_only_warnings_and_errors_to_the_console(tmp_path):
    path = tmp_path / "logs" / "actor_rollout_ref_rank1.log"
    script = (
        _library_with_own_handler()
        + textwrap.dedent("""
        from verl_lite.utils.logs import route_worker_output
        route_worker_output()
    """)
        + EMIT
    )
    proc = _run(script, {logs.WORKER_LOG_ENV: str(path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "", "a routed worker prints nothing on its stdout"
    assert "WARNING: own warning line" in proc.stderr and "ERROR: library error line" in proc.stderr
    for hidden in ("own info line", "library warning line", "plain print", "os-level", "deprecation"):
        assert hidden not in proc.stderr, hidden
    log = path.read_text()
    for line in (
        "own info line",
        "library warning line",
        "library with its own handler",
        "a deprecation notice",
        "plain print line",
        "os-level stderr line",
    ):
        assert line in log, line


def test_an_unrouted_worker_prints_as_before():
    proc = _run("from verl_lite.utils.logs import route_worker_output\nprint(route_worker_output())", {})
    assert proc.returncode == 0 and proc.stdout.strip() == "None"


def test_worker_log_paths_and_tail(tmp_path, monkeypatch):
    monkeypatch.delenv(logs.LOG_DIR_ENV, raising=False)
    assert logs.worker_log_path("critic", 0) is None
    monkeypatch.setenv(logs.LOG_DIR_ENV, str(tmp_path))
    path = logs.worker_log_path("critic", 3)
    assert path == str(tmp_path / "critic_rank3.log")
    assert logs.tail(path) == ""
    with open(path, "w") as f:
        f.write("".join(f"line {i}\n" for i in range(100)))
    assert logs.tail(path, 3) == "line 97\nline 98\nline 99"
