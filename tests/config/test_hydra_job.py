"""Hydra multirun: `-m key=a,b` runs both jobs to completion in one process, each in its own folder
with its own override, on verl's config and on the demo; the Slurm launcher config composes with
hydra-submitit-launcher."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.test_main_ppo import SMALL

ONE_STEP = [o for o in SMALL if not o.startswith(("trainer.total_training_steps", "trainer.test_freq"))] + [
    "trainer.total_training_steps=1",
    "trainer.val_before_train=False",
    "trainer.test_freq=-1",
]


def _multirun(sweep_dir, *overrides, timeout=600):
    cmd = [
        sys.executable,
        "-m",
        "verl_lite.main_ppo",
        "--config-name",
        "demo",
        "-m",
        f"hydra.sweep.dir={sweep_dir}",
        *overrides,
    ]
    env = dict(os.environ, RAY_DEDUP_LOGS="0")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.slow
def test_sweep_runs_every_job_in_its_own_folder(tmp_path):
    proc = _multirun(tmp_path, *ONE_STEP, "actor_rollout_ref.actor.optim.lr=0.0001,0.0003")
    assert proc.returncode == 0, proc.stderr[-4000:]
    for job, lr in ((0, 0.0001), (1, 0.0003)):
        job_dir = tmp_path / str(job)
        with open(job_dir / ".hydra" / "overrides.yaml") as f:
            assert f"actor_rollout_ref.actor.optim.lr={lr}" in yaml.safe_load(f)
        rows = [json.loads(line) for line in open(job_dir / "metrics.jsonl")]
        assert [r["step"] for r in rows] == [1]  # one job's metrics only, nothing appended by the other
        assert rows[0]["actor/lr"] == pytest.approx(lr)
    # one process, a fresh Ray per job (each job shuts down the Ray it started)
    assert (proc.stdout + proc.stderr).count("started a local Ray instance") == 2


def _job_config(num: int, output_dir: str, overrides: list[str], config_name: str = "demo"):
    """The HydraConfig a multirun job sees, from Hydra's own compose (the launcher fills the rest)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from verl_lite.config.compose import compose_config, to_config

    cfg = compose_config(overrides, config_name, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.mode = "MULTIRUN"
        cfg.hydra.job.num = num
        cfg.hydra.runtime.output_dir = output_dir
        cfg.hydra.overrides.task = overrides
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return to_config(cfg)


@pytest.fixture
def hydra_config_reset():
    from hydra.core.hydra_config import HydraConfig

    yield
    HydraConfig.instance().cfg = None


@pytest.mark.parametrize("config_name", ["ppo_trainer", "demo"])
def test_explicit_dir_is_kept_and_a_reused_one_refused(tmp_path, hydra_config_reset, config_name):
    from verl_lite.config import hydra_job
    from verl_lite.config.hydra_job import apply_job_output_dir

    hydra_job._dirs_used_by_earlier_jobs.clear()  # one sweep per test: a fresh process in real runs
    dirs = ["trainer.default_local_dir=" + str(tmp_path / "a")]
    first = _job_config(0, str(tmp_path / "0"), dirs, config_name)
    apply_job_output_dir(first)
    assert first.trainer.default_local_dir == str(tmp_path / "a")
    second = _job_config(1, str(tmp_path / "1"), dirs, config_name)
    with pytest.raises(ValueError, match=r"trainer.default_local_dir=.*already used by an earlier job"):
        apply_job_output_dir(second)
    third = _job_config(2, str(tmp_path / "2"), ["trainer.experiment_name=x"], config_name)
    apply_job_output_dir(third)
    assert third.trainer.default_local_dir == str(tmp_path / "2")  # not set: the job's folder


def test_slurm_launcher_config_composes():
    from omegaconf import OmegaConf

    from verl_lite.config.compose import compose_config

    cfg = compose_config(["hydra/launcher=slurm", "trainer.n_gpus_per_node=4"], return_hydra_config=True)
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher["_target_"] == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert launcher["nodes"] == 1 and launcher["tasks_per_node"] == 1
    assert launcher["gpus_per_node"] == 4  # follows trainer.n_gpus_per_node
    assert launcher["timeout_min"] == 1440 and launcher["signal_delay_s"] == 120
