"""Every example script (examples/<algo>_trainer/run_*.sh) runs 2 steps through the CLI.

The scripts are verl launch lines (verl's config, not the demo: verl's defaults apply to every key a
line leaves out) on the embedded tiny model and task, with verl's spellings (`+` for mixed
precision, `trainer.logger='[...]'`, `rollout.mode=async`, `multi_turn.format`) and verl's memory
keys (remove padding, gradient checkpointing, dynamic batch size, offload, fused kernels off, no
sequence parallelism). Each run adds small size overrides (one worker unless the run checks data
parallelism, no validation, a tiny batch), then checks that metrics.jsonl holds finite values of
the metrics only that algorithm produces, so a script whose algorithm silently fell back to another
would fail. The PPO line names no adv_estimator: verl's default gae must train a critic.
"""

import json
import math
import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.helpers import shared_ray
from tests.helpers.models import make_tiny_reward_model_dir
from verl_lite.config.schema import TINY_VAL
from verl_lite.data import assets

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = [
    "data.train_batch_size=8",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "trainer.n_gpus_per_node=1",
    "trainer.total_training_steps=2",
    "trainer.val_before_train=False",
    "trainer.test_freq=-1",
    "trainer.logger=file",  # verl's spelling: one name, not a list
]
COMMON = ["actor/pg_loss", "actor/grad_norm", "critic/score/mean", "critic/advantages/mean", "timing_s/step"]
# script -> (extra overrides, metrics that show the algorithm ran)
EXAMPLES = {
    "ppo_trainer/run_tiny_ppo.sh": (
        ["trainer.critic_warmup=1"],
        [
            "critic/vf_loss",
            "critic/vf_clipfrac",
            "critic/grad_norm",
            "critic/lr",
            "critic/values/mean",
            "critic/vf_explained_var",
            "critic/returns/mean",
            "actor/reward_kl_penalty",
            "timing_s/values",
            "timing_s/update_critic",
        ],
    ),
    "grpo_trainer/run_tiny_grpo.sh": (
        ["trainer.n_gpus_per_node=2"],  # the one data-parallel run: balance_batch across 2 ranks
        [
            "actor/kl_loss",
            "timing_s/ref/compute_ref_log_prob",
            "global_seqlen/balanced_max",
            "perf/offload/h2d_gb",
        ],
    ),
    "rloo_trainer/run_tiny_rloo.sh": ([], ["actor/reward_kl_penalty", "actor/reward_kl_penalty_coeff"]),
    "reinforce_plus_plus_trainer/run_tiny_reinforce_plus_plus.sh": ([], ["actor/kl_loss"]),
    "dapo_trainer/run_tiny_dapo.sh": (
        [],
        ["train/num_gen_batches", "train/kept_group_ratio", "reward_extra/overlong_reward/mean"],
    ),
    "drgrpo_trainer/run_tiny_drgrpo.sh": ([], ["actor/pg_clipfrac"]),
    "gpg_trainer/run_tiny_gpg.sh": ([], []),  # plain policy gradient: see ABSENT
    "otb_trainer/run_tiny_otb.sh": (
        [],
        [
            "variance_proxy/proxy2_total_power",
            "variance_proxy/expected_w",
            "variance_proxy/proxy3_pure_noise",
        ],
    ),
    "remax_trainer/run_tiny_remax.sh": (
        # validation scored by the reward model, which reads the actor's ids (verl's default re-tokenises)
        [
            "reward_model.enable=True",
            "reward_model.use_reward_loop=False",
            "reward_model.model.input_tokenizer=null",
            "trainer.test_freq=2",
        ],
        ["critic/reward_baselines/mean", "timing_s/gen_max"],
    ),
}

# metrics a script must NOT produce: gpg's loss has no ratio, so a fallback to PPO's would show these
ABSENT = {"gpg_trainer/run_tiny_gpg.sh": ["actor/pg_clipfrac", "actor/ppo_kl"]}


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    return make_tiny_reward_model_dir(str(tmp_path_factory.mktemp("tiny_rm")))


@pytest.fixture(scope="module")
def small_val(tmp_path_factory):
    """16 prompts of the tiny task's validation set: enough to check validation, cheap to generate."""
    path = tmp_path_factory.mktemp("val") / "val.parquet"
    pd.read_parquet(assets.resolve(TINY_VAL)).head(16).to_parquet(path)
    return str(path)


def run_example(script: str, out, *overrides) -> subprocess.CompletedProcess:
    cmd = [
        "bash",
        os.path.join(ROOT, "examples", script),
        f"hydra.run.dir={out}",
        f"trainer.default_local_dir={out}",
    ]
    # the script's run joins the tests' shared cluster, as under `ray start` (tests/helpers/shared_ray.py)
    env = shared_ray.joined_env(dict(os.environ, PYTHON=sys.executable, RAY_DEDUP_LOGS="0", ENGINE="hf"))
    return subprocess.run([*cmd, *overrides], capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)


@pytest.mark.parametrize("script", list(EXAMPLES))
def test_example_runs_two_steps_with_its_algorithms_metrics(script, tmp_path, rm_dir, small_val):
    extra, expected = EXAMPLES[script]
    if "reward_model.enable=True" in extra:
        extra = [
            *extra,
            f"reward_model.model.path={rm_dir}",
            f"data.val_files={small_val}",
            "reward_model.micro_batch_size_per_gpu=8",
        ]
    proc = run_example(script, tmp_path, *SMALL, *extra)
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open(tmp_path / "metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    assert [r["step"] for r in rows] == [1, 2]
    warmup = "trainer.critic_warmup=1" in extra  # step 1 trains only the critic
    for row in rows:
        needed = [
            k for k in COMMON + expected if not (warmup and row["step"] == 1 and k.startswith("actor/"))
        ]
        missing = [k for k in needed if k not in row]
        assert not missing, f"step {row['step']} lacks {missing}"
        bad = {k: v for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)}
        assert not bad, bad
        assert not [k for k in ABSENT.get(script, []) if k in row], row
    if warmup:
        assert "actor/pg_loss" not in rows[0] and "timing_s/update_actor" in rows[0]
    if "trainer.test_freq=2" in extra:  # scored by the reward model: not a multiple of 1/16 as 0/1 rules give
        val = rows[1]["val-core/verl_lite/arith/reward/mean@1"]
        assert math.isfinite(val) and (val * 16) % 1 != 0, val
    # the actor learned: some step has a gradient (a step whose groups all score alike has none: on the
    # tiny task with no KL term that happens, e.g. gpg's step 2 after a clipped step 1)
    assert any(r.get("actor/grad_norm", 0) > 0 for r in rows), [r.get("actor/grad_norm") for r in rows]
    for row in rows if "global_seqlen/balanced_max" in expected else []:  # balancing never makes it worse
        spread = row["global_seqlen/balanced_max"] - row["global_seqlen/balanced_min"]
        assert 0 <= spread <= row["global_seqlen/minmax_diff"], row
    if "perf/offload/h2d_gb" in expected:  # the line's param and optimizer offload really moved bytes
        assert rows[-1]["perf/offload/h2d_gb"] > 0


def test_val_only_validates_a_sample_of_the_data_once_and_stops(tmp_path):
    """verl's trainer.val_only with val_before_train, on verl's data.{train,val}_max_samples; Ray's
    timeline file (ray_kwargs.timeline_json_file) is written at the end."""
    timeline = tmp_path / "timeline.json"
    proc = run_example(
        "rloo_trainer/run_tiny_rloo.sh",
        tmp_path,
        *[o for o in SMALL if not o.startswith("trainer.val_before_train")],
        "trainer.val_before_train=True",
        "trainer.val_only=True",
        "data.train_max_samples=64",
        "data.val_max_samples=24",
        f"ray_kwargs.timeline_json_file={timeline}",
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open(tmp_path / "metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    assert [r["step"] for r in rows] == [0] and "val-core/verl_lite/arith/reward/mean@1" in rows[0]
    assert (rows[0]["val-core/verl_lite/arith/reward/mean@1"] * 24) % 1 == 0  # a mean over 24 prompts
    assert "using 24 of 1000 rows" in proc.stderr + proc.stdout and "using 64 of" in proc.stderr + proc.stdout
    assert timeline.exists() and json.loads(timeline.read_text())
