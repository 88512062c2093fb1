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
    "print(during, gc.isenabled(), import_gc.paused_for_imports)\n"
)


def _probe(env_value: str | None, collector: str = "on") -> str:
    env = {k: v for k, v in os.environ.items() if k != import_gc.PAUSE_ENV}
    if env_value is not None:
        env[import_gc.PAUSE_ENV] = env_value
    proc = subprocess.run([sys.executable, "-c", PROBE, collector], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_worker_imports_paused_and_collects_after():
    assert _probe("1") == "False True True"


def test_any_other_process_is_untouched():
    assert _probe(None) == "True True False"
    assert _probe("0") == "True True False"


def test_a_collector_its_user_turned_off_stays_off():
    assert _probe("1", collector="off") == "False False False"
