"""utils/import_gc.py: the collector paused for a driver's or worker's imports, and only theirs."""

import os
import subprocess
import sys

from verl_lite.utils import import_gc

PROBE = (
    "import gc, sys\n"
    "if sys.argv[1] == 'off': gc.disable()\n"
    "import verl_lite\n"
    "from verl_lite.utils import import_gc\n"
    "during = gc.isenabled()\n"
    "import_gc.resume()\n"
    "print(during, gc.isenabled(), import_gc.paused_for_imports, gc.get_freeze_count() > 10000)\n"
)


def _probe(env_value: str | None, collector: str = "on") -> str:
    env = {k: v for k, v in os.environ.items() if k != import_gc.PAUSE_ENV}
    if env_value is not None:
        env[import_gc.PAUSE_ENV] = env_value
    proc = subprocess.run([sys.executable, "-c", PROBE, collector], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_worker_imports_paused_and_collects_after_with_the_imports_frozen():
    assert _probe("1") == "False True True True"


def test_any_other_process_is_untouched():
    assert _probe(None) == "True True False False"
    assert _probe("0") == "True True False False"


def test_a_collector_its_user_turned_off_stays_off():
    assert _probe("1", collector="off") == "False False False False"


LATER_PROBE = (
    "import gc\n"
    "import verl_lite\n"
    "from verl_lite.utils import import_gc\n"
    "import_gc.resume()\n"
    "before = gc.get_freeze_count()\n"
    "with import_gc.later_imports():\n"
    "    during = gc.isenabled()\n"
    "    built = [[i] for i in range(20000)]  # what an import leaves behind\n"
    "print(during, gc.isenabled(), gc.get_freeze_count() - before >= 20000)\n"
)


def test_a_library_imported_later_is_frozen_only_where_the_first_imports_were():
    """vLLM, imported in the rollout's build: paused and frozen in a worker, untouched elsewhere."""
    for pause, expected in (("1", "False True True"), ("0", "True True False")):
        env = dict(os.environ, **{import_gc.PAUSE_ENV: pause})
        proc = subprocess.run([sys.executable, "-c", LATER_PROBE], env=env, capture_output=True, text=True)
        assert proc.returncode == 0 and proc.stdout.strip() == expected, (pause, proc.stdout, proc.stderr)


EXIT_PROBE = (
    "import atexit, sys\n"
    "import verl_lite\n"
    "from verl_lite.utils import import_gc\n"
    "import_gc.resume()\n"
    "log = open(sys.argv[1], 'w')  # left open, as a reward function's global log file may be\n"
    "log.write('written, never flushed by its owner')\n"
    "class Proxy:  # an object whose __class__ raises, as some lazy proxies do\n"
    "    @property\n"
    "    def __class__(self): raise RuntimeError('not loaded')\n"
    "proxy = [Proxy()]\n"
    "broken = open(sys.argv[1] + '.broken', 'w'); broken.write('x'); broken.detach()  # .closed raises\n"
    "atexit.register(print, 'atexit ran', flush=True)\n"
    "import_gc.exit_now(None if sys.argv[2] == 'None' else int(sys.argv[2]) if sys.argv[2].isdigit() else sys.argv[2])\n"
)


def _exit_probe(tmp_path, code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **{import_gc.PAUSE_ENV: "1"})
    path = tmp_path / f"left_open_{code}.txt"
    proc = subprocess.run(
        [sys.executable, "-c", EXIT_PROBE, str(path), code], env=env, capture_output=True, text=True
    )
    assert path.read_text() == "written, never flushed by its owner"  # flushed without the teardown
    assert proc.stdout == "atexit ran\n"
    return proc


def test_exit_now_runs_atexit_flushes_open_files_and_keeps_sys_exits_status(tmp_path):
    assert _exit_probe(tmp_path, "None").returncode == 0
    assert _exit_probe(tmp_path, "3").returncode == 3
    refused = _exit_probe(tmp_path, "bad input")
    assert (refused.returncode, refused.stderr) == (1, "bad input\n")


def test_exit_status_is_what_sys_exit_would_end_with(capsys):
    """The status both ends of main_ppo (exit_now, and the exit past stray threads) give os._exit."""
    assert [import_gc.exit_status(c) for c in (None, 0, 3, True, False)] == [0, 0, 3, 1, 0]
    assert capsys.readouterr().err == ""
    assert import_gc.exit_status("verl_lite: bad input") == 1
    assert capsys.readouterr().err == "verl_lite: bad input\n"


PRINT_PROBE = (
    "import sys\n"
    "import verl_lite\n"
    "from verl_lite.utils import import_gc\n"
    "import_gc.resume()\n"
    "print('the last line a reward function printed')  # buffered: stdout is a pipe\n"
    "import_gc.exit_now(0) if sys.argv[1] == 'exit_now' else import_gc.end(0)\n"
)


def test_both_ends_flush_what_the_run_printed_to_a_pipe():
    """sys.stdout was made before the freeze, so the walk for open files does not see it: both ends
    flush the standard streams themselves (without PYTHONUNBUFFERED, as a user's shell runs it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env[import_gc.PAUSE_ENV] = "1"
    for how in ("exit_now", "end"):
        proc = subprocess.run(
            [sys.executable, "-c", PRINT_PROBE, how], env=env, capture_output=True, text=True
        )
        assert (proc.returncode, proc.stdout) == (0, "the last line a reward function printed\n"), (how, proc)
