"""scripts/bench_test_cpu.py: a child that burns CPU is counted, and the command's exit status is kept."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BURN = "import time\nend = time.process_time() + 1.5\nwhile time.process_time() < end: pass\n"


def test_a_burning_child_is_counted_and_the_exit_status_kept():
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BURN!r}]); sys.exit(3)"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "scripts", "bench_test_cpu.py"),
            "--interval",
            "0.1",
            "--",
            sys.executable,
            "-c",
            parent,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    (row,) = [line for line in proc.stdout.splitlines() if line.startswith("| other |")]
    processes, seconds = row.split("|")[2:4]
    assert int(processes) == 2 and 1 <= float(seconds) <= 3, proc.stdout
