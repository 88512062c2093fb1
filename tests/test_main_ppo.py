"""The CLI end to end on the tiny demo (conf/demo.yaml): a real Ray, FSDP2 on gloo, parquet files, Hydra.

One 2-step run is shared by the checks on metrics.jsonl; a second identical run checks that the
same config gives the same metrics (timing and throughput aside). Bad input must fail before Ray
starts, with a message naming the cause.
"""

import json
import math
import os
import re
import subprocess
import sys
import time

import pandas as pd
import pytest

from tests.helpers import shared_ray
from tests.helpers.console import assert_console_is_readable, assert_console_shows_the_run

pytestmark = pytest.mark.slow

SMALL = [
    "data.train_batch_size=8",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "trainer.n_gpus_per_node=2",
    "trainer.total_training_steps=2",
    "trainer.test_freq=2",
    "data.val_batch_size=128",
    # the reference backend keeps these runs fast; the vLLM rollout's CLI runs are test_main_ppo_vllm.py
    "actor_rollout_ref.rollout.name=hf",
]
# figures that measure the machine, not the computation
NONDETERMINISTIC = (
    "timing_s/",
    "perf/throughput",
    "perf/time_per_step",
    "perf/rollout_tokens_per_s",
    "perf/cpu_memory",
)
REQUIRED = [
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "actor/entropy",
    "actor/grad_norm",
    "actor/lr",
    "critic/score/mean",
    "critic/rewards/mean",
    "critic/advantages/mean",
    "response_length/mean",
    "response_length/clip_ratio",
    "prompt_length/mean",
    "timing_s/gen",
    "timing_s/update_actor",
    "timing_s/step",
    "perf/throughput",
    "perf/total_num_tokens",
    "rollout/actor_logprob_abs_diff_max",
    "val-core/verl_lite/arith/reward/mean@1",
]


def run_cli(
    tmp_path, *overrides, timeout=600, config_name="demo", env=None, join=False
) -> subprocess.CompletedProcess:
    """main_ppo with the named config (None: the bare command, verl's ppo_trainer config); `env` adds
    environment variables. `join`: the run joins this pytest process's Ray cluster, as a run joins a
    cluster that `ray start` made, instead of starting its own (tests/helpers/shared_ray.py says
    which runs may)."""
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "verl_lite.main_ppo",
        *(["--config-name", config_name] if config_name else []),
        f"hydra.run.dir={out}",
        f"trainer.default_local_dir={out}",
        *overrides,
    ]
    env = dict(os.environ, RAY_DEDUP_LOGS="0", **(env or {}))
    if join:
        env = shared_ray.joined_env(env)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def read_metrics(tmp_path) -> list[dict]:
    with open(tmp_path / "run" / "metrics.jsonl") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def two_step_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    proc = run_cli(tmp, *SMALL)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return tmp, proc


def test_two_step_run_writes_every_metric_finite(two_step_run):
    tmp, proc = two_step_run
    rows = read_metrics(tmp)
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert "val-core/verl_lite/arith/reward/mean@1" in rows[0]  # val_before_train
    for row in rows[1:]:
        missing = [
            k for k in REQUIRED if k not in row and not (k.startswith("val-core") and row["step"] == 1)
        ]
        assert not missing, f"step {row['step']} lacks {missing}"
        bad = {k: v for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)}
        assert not bad, bad
        # the HF rollout samples the actor's own distribution (no hidden top-k): fp32 on CPU, ~1e-6
        assert row["rollout/actor_logprob_abs_diff_max"] < 1e-4, row
    assert rows[1]["perf/total_num_tokens"] > 0 and 0 <= rows[2]["critic/score/mean"] <= 1


def test_console_shows_each_step_and_no_third_party_output(two_step_run):
    """A person reads the console: verl_lite's lines only (Ray's, transformers' and the workers'
    output is in the run folder's log files), no progress-bar frames in a pipe, one line per step
    with its headline metrics, and every metric at the validation steps (0, 2) and the last (2)."""
    tmp, proc = two_step_run
    assert_console_is_readable(proc.stdout + proc.stderr)
    assert_console_shows_the_run(proc.stdout, read_metrics(tmp))
    run = tmp / "run"
    assert "Started a local Ray instance" in (run / "main_ppo.log").read_text(), "Ray's notices are kept"
    assert sorted(os.listdir(run / "logs")) == ["actor_rollout_ref_rank0.log", "actor_rollout_ref_rank1.log"]


def test_a_worker_error_is_shown_on_the_console(tmp_path):
    """An error raised inside a worker (here: importing model.external_lib, which fails only in a
    worker: start-up imports it too, before Ray) still reaches the console."""
    (tmp_path / "failing_model_lib.py").write_text(
        'import os\n\nif "RANK" in os.environ:\n    raise RuntimeError("injected failure in a worker")\n'
    )
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    one_worker = [o for o in SMALL if not o.startswith("trainer.n_gpus_per_node")] + [
        "trainer.n_gpus_per_node=1"
    ]
    proc = run_cli(tmp_path, *one_worker, "actor_rollout_ref.model.external_lib=failing_model_lib", env=env)
    assert proc.returncode != 0
    assert "injected failure in a worker" in proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    assert re.search(r"actor_rollout_ref rank \d raised in init_model", proc.stderr), proc.stderr[-3000:]


def test_same_config_gives_identical_metrics(two_step_run, tmp_path):
    first_tmp, _ = two_step_run
    # the second run joins a running cluster (as under `ray start` or Slurm): the same numbers
    proc = run_cli(tmp_path, *SMALL, join=True)
    assert proc.returncode == 0, proc.stderr[-4000:]

    def stable(rows):
        return [{k: v for k, v in r.items() if not k.startswith(NONDETERMINISTIC)} for r in rows]

    first, second = stable(read_metrics(first_tmp)), stable(read_metrics(tmp_path))
    assert first == second
    assert first[1]["actor/grad_norm"] > 0, "a trivially empty update would also be 'deterministic'"


def _fails_fast(tmp_path, monkeypatch, capsys, *overrides, match: str, config_name="demo"):
    """Refused with exit 2 and `match` in the message, before Ray (start_ray fails the test if called):
    the CLI's own path in this process (tests/test_bad_input.run_in_process); the process boundary
    (exit status, stderr, no Ray started) is checked by test_bad_input's process-level tests."""
    from tests.test_bad_input import run_in_process

    overrides = (f"trainer.default_local_dir={tmp_path}/run", *overrides)
    code, message, seconds = run_in_process(
        list(overrides), monkeypatch, capsys, config_name or "ppo_trainer"
    )
    assert code == 2 and match in message, message
    return message


def test_impossible_batch_geometry_fails_fast(tmp_path, monkeypatch, capsys):
    _fails_fast(
        tmp_path,
        monkeypatch,
        capsys,
        "data.train_batch_size=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.rollout.n=3",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "trainer.n_gpus_per_node=2",
        match="ppo_micro_batch_size_per_gpu=4 does not divide the per-worker mini-batch of 6",
    )


def test_bare_command_names_verls_placeholder_paths_and_the_demo(tmp_path):
    """verl's defaults name placeholder paths: one message naming each and the demo command (the
    bare command as a user types it, in its own process)."""
    start = time.time()
    proc = run_cli(tmp_path, timeout=120, config_name=None)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "started a local Ray" not in proc.stderr + proc.stdout, "bad input must fail before Ray starts"
    lines = [line for line in proc.stderr.splitlines() if line.startswith("verl_lite:")]
    assert len(lines) == 1 and "python -m verl_lite.main_ppo --config-name demo" in lines[0], proc.stderr
    assert (
        "actor_rollout_ref.model.path=~/models/deepseek-llm-7b-chat, critic.model.path="
        "~/models/deepseek-llm-7b-chat, data.train_files=~/data/rlhf/gsm8k/train.parquet, data.val_files="
        "~/data/rlhf/gsm8k/test.parquet: verl's placeholder paths" in lines[0]
    ), lines
    assert time.time() - start < 120


def test_missing_data_file_fails_fast(tmp_path, monkeypatch, capsys):
    _fails_fast(
        tmp_path, monkeypatch, capsys, f"data.train_files={tmp_path}/nope.parquet", match="data.train_files"
    )


def test_overlong_prompt_with_truncation_error_fails_fast(tmp_path, monkeypatch, capsys):
    long_prompt = [{"role": "user", "content": "1+" * 40 + "1="}]
    rows = [
        {
            "data_source": "verl_lite/arith",
            "prompt": long_prompt,
            "ability": "math",
            "reward_model": {"ground_truth": "41"},
            "extra_info": {"index": 0},
        }
    ] * 8
    path = tmp_path / "long.parquet"
    pd.DataFrame(rows).to_parquet(path)
    _fails_fast(
        tmp_path,
        monkeypatch,
        capsys,
        f"data.train_files={path}",
        "data.truncation=error",
        match="over data.max_prompt_length=16",
    )


def test_unknown_key_is_named_with_the_nearest_before_hydra(tmp_path):
    proc = run_cli(tmp_path, "+trainer.val_onyl=True", timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "trainer.val_onyl is not a key of verl_lite's config" in proc.stderr
    assert "did you mean trainer.val_only?" in proc.stderr


@pytest.mark.parametrize(
    "mode",
    [
        ["actor_rollout_ref.actor.fsdp_config.offload_policy=True"],
        [
            "actor_rollout_ref.actor.fsdp_config.param_offload=True",
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
        ],
    ],
    ids=["offload_policy", "param_and_optimizer_offload"],
)
def test_offload_modes_give_the_same_training(two_step_run, tmp_path, mode):
    base_tmp, _ = two_step_run
    proc = run_cli(tmp_path, *SMALL, *mode, join=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    base, offloaded = read_metrics(base_tmp), read_metrics(tmp_path)
    for b, o in zip(base[1:], offloaded[1:]):
        for key in ("actor/pg_loss", "actor/grad_norm", "critic/score/mean"):
            assert abs(b[key] - o[key]) < 1e-5, (key, b[key], o[key])
    moved = offloaded[1].get("perf/offload/h2d_gb", 0) + offloaded[1].get("perf/offload/policy_h2d_gb", 0)
    assert moved > 0 and base[1]["perf/offload/h2d_gb"] == 0, "the offloaded run must report its traffic"


EXIT_WITH_A_THREAD = """
import sys, threading, time
from concurrent.futures import ThreadPoolExecutor
from verl_lite.main_ppo import exit_past_stray_threads
if sys.argv[1] == "finishing":  # what transformers' weight loading leaves: a pool shut down without waiting
    pool = ThreadPoolExecutor(max_workers=2)
    pool.submit(time.sleep, 0.5)
    pool.shutdown(wait=False)
else:
    threading.Thread(target=time.sleep, args=(60,), name="left_behind").start()
exit_past_stray_threads(sys.argv[2] if len(sys.argv) > 2 else 3)
"""


@pytest.mark.parametrize("thread", ["finishing", "left_behind"])
def test_exit_waits_briefly_for_threads_that_are_ending_and_names_the_rest(thread):
    """A thread that ends within the grace is not reported (it made a bad-input exit print a second
    line on a loaded machine); one still running after it is named, and the process exits anyway."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", EXIT_WITH_A_THREAD, thread], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    named = "non-daemon thread(s) started during it are still running ('left_behind'" in proc.stderr
    assert named == (thread == "left_behind"), proc.stderr[-2000:]
    assert time.monotonic() - start < 30  # not the 60 s of the thread left behind


def test_an_exit_with_a_message_past_a_stray_thread_prints_it_and_ends_with_1():
    """sys.exit's rule for a message (printed, status 1) holds where the exit skips a stray thread."""
    proc = subprocess.run(
        [sys.executable, "-c", EXIT_WITH_A_THREAD, "left_behind", "verl_lite: the message"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "verl_lite: the message\n" in proc.stderr, proc.stderr[-2000:]
