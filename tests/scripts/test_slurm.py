"""scripts/slurm/ray_on_slurm.sbatch on a real one-node Slurm (Debian's slurm-wlm + munge, started by
scripts/slurm/local_cluster.sh): Ray head from the allocation, main_ppo as a driver on it, the
allocation's node count and CPUs as trainer.nnodes / n_gpus_per_node, overrides passed through,
and no Ray process of the job left behind. .ci/run installs the packages; without them (or root)
the test is skipped with that reason.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("slurmctld") is None or os.geteuid() != 0,
        reason="needs root and Debian's slurm-wlm + munge (apt-get install -y slurm-wlm munge; .ci/run does)",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts" / "slurm"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # an ephemeral port: outside Ray's worker ports 10002-19999
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    state = tmp_path_factory.mktemp("slurm")
    ports = [str(_free_port()), str(_free_port())]
    start = subprocess.run(
        [str(SCRIPTS / "local_cluster.sh"), "start", str(state), *ports],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert start.returncode == 0, start.stdout + start.stderr
        yield dict(os.environ, SLURM_CONF=str(state / "slurm.conf"))
    finally:
        subprocess.run([str(SCRIPTS / "local_cluster.sh"), "stop", str(state)], timeout=60)


def _ray_processes(port: int) -> list[str]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if f":{port}" in cmd or f"port={port}" in cmd:
            found.append(cmd[:200])
    return found


def test_sbatch_runs_main_ppo_on_a_ray_cluster_from_the_allocation(slurm, tmp_path):
    port = _free_port()
    env = dict(
        slurm,
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        PYTHON=sys.executable,
        RAY_HEAD_IP="127.0.0.1",
        RAY_PORT=str(port),
        RAY_CLIENT_PORT=str(_free_port()),
        RAY_DEDUP_LOGS="0",
    )
    out = tmp_path / "job.out"
    overrides = [
        "--config-name=demo",
        "data.train_batch_size=8",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.name=hf",  # the script's logic is under test, not the rollout
        "trainer.total_training_steps=1",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        f"trainer.default_local_dir={tmp_path}/run",
        f"hydra.run.dir={tmp_path}/hydra",
    ]
    cmd = [
        "sbatch",
        "--wait",
        "--nodes=1",
        f"--output={out}",
        str(SCRIPTS / "ray_on_slurm.sbatch"),
        *overrides,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    log = out.read_text() if out.exists() else ""
    assert proc.returncode == 0, proc.stderr + log[-5000:]
    # nnodes and workers per node from the allocation: 1 node, no GPU, so one CPU worker per CPU
    cpus = os.cpu_count()
    assert "--config-name=demo data.train_batch_size=8" in log  # the user's arguments first, as given
    assert f"hydra.run.dir={tmp_path}/hydra trainer.nnodes=1 trainer.n_gpus_per_node={cpus}\n" in log
    assert "joined the Ray cluster at" in log and "started a local Ray instance" not in log
    rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1] and rows[0]["actor/grad_norm"] > 0
    deadline = time.time() + 30
    while _ray_processes(port) and time.time() < deadline:
        time.sleep(1)
    assert not _ray_processes(port), "the job's Ray processes outlived it"
