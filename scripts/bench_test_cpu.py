"""Where a command's CPU goes, by kind of process: the suite's cost on 2 cores is CPU (docs/testing.md).

    python scripts/bench_test_cpu.py -- python -m pytest -q tests -n 2 --dist loadfile

runs the command and reads its process's and every descendant's CPU time (user + system, from /proc through
psutil) every `--interval` seconds until the command ends, then prints one table row per kind of
process (Ray workers, CLI drivers, Ray's daemons, pytest workers, ...) with their count and CPU
seconds. A process that lives less than the interval may be missed, and each loses up to its last interval. Its
exit status is the command's. `--dump FILE` writes one JSON line per process (command, CPU, start).
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import time

import psutil

KINDS = [  # (kind, a test on the process's command line and name), first match wins
    (
        "pytest workers (in-process tests, collection)",
        lambda c, n: "exec(eval(sys.stdin" in c or "-m pytest" in c,
    ),
    ("gloo ranks forked by tests/helpers/dist.py", lambda c, n: "multiprocessing.forkserver" in c),
    ("CLI drivers (python -m verl_lite.main_ppo)", lambda c, n: "verl_lite.main_ppo" in c),
    ("Ray daemons", lambda c, n: any(k in n for k in ("ray::Dashboard", "ray::RuntimeEnv"))),
    ("Ray workers (actors)", lambda c, n: "default_worker" in c or n.startswith("ray::")),
    (
        "Ray daemons",
        lambda c, n: any(k in c for k in ("gcs_server", "raylet", "log_monitor", "monitor.py", "dashboard")),
    ),
    ("C++ compiler (vLLM / inductor)", lambda c, n: n in ("cc1plus", "g++", "ld", "as")),
    ("scripts and tools", lambda c, n: "scripts/" in c or "verl_lite." in c),
]


def kind(cmd: str, name: str) -> str:
    return next((k for k, test in KINDS if test(cmd, name)), "other")


def sample(proc: subprocess.Popen, interval: float) -> dict:
    root, seen = psutil.Process(proc.pid), {}
    while proc.poll() is None:
        try:
            children = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for p in children:
            try:
                with p.oneshot():
                    key = (p.pid, p.create_time())
                    if key not in seen:
                        seen[key] = {"cmd": " ".join(p.cmdline())[:300], "start": p.create_time()}
                    times = p.cpu_times()
                    seen[key].update(cpu=times.user + times.system, name=p.name())
            except (psutil.Error, OSError):
                pass
        time.sleep(interval)
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--interval", type=float, default=0.3)
    parser.add_argument("--dump", help="one JSON line per process")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")
    start = time.time()
    proc = subprocess.Popen(command)
    seen = sample(proc, args.interval)
    wall = time.time() - start
    total, count = collections.Counter(), collections.Counter()
    for info in seen.values():
        k = kind(info["cmd"], info.get("name", ""))
        total[k] += info.get("cpu", 0.0)
        count[k] += 1
    if args.dump:
        with open(args.dump, "w") as f:
            for (pid, _), info in seen.items():
                f.write(json.dumps({"pid": pid, **info, "start": info["start"] - start}) + "\n")
    cpu = sum(total.values())
    print(f"\nwall {wall:.0f} s, CPU {cpu:.0f} s over {len(seen)} processes (exit {proc.returncode})")
    print("| process kind | processes | CPU s | share |\n| --- | --- | --- | --- |")
    for k, seconds in total.most_common():
        print(f"| {k} | {count[k]} | {seconds:.0f} | {100 * seconds / max(cpu, 1e-9):.0f}% |")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
