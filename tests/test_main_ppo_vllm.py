"""The CLI end to end with the vLLM rollout (the default where vLLM is installed): Ray workers each
holding an FSDP2 actor and an in-process vLLM engine on one gloo group.

Every step must show that vLLM sampled from the actor's current weights (the rollout/actor log-prob
diff), report the weight sync, and two identical runs must give identical metrics.
"""

import math

import pytest

from tests.helpers.console import assert_console_is_readable, assert_console_shows_the_run
from tests.helpers.tp_lock import tp_engine_lock
from tests.test_main_ppo import NONDETERMINISTIC, SMALL, read_metrics, run_cli

ARR_MINI = "actor_rollout_ref.actor.ppo_mini_batch_size="

pytest.importorskip("vllm", reason="the vLLM rollout needs vllm (make install)")
pytestmark = pytest.mark.slow

VLLM = [o for o in SMALL if not o.startswith(("actor_rollout_ref.rollout.name=", ARR_MINI))] + [
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.cpu_kv_cache_gb=0.25",
    # one mini-batch, one epoch: the on-policy step (no old-log-prob pass; the KL loss's reference
    # pass runs inside update_actor's call)
    f"{ARR_MINI}8",
    "actor_rollout_ref.actor.ppo_epochs=1",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.01",
]


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli_vllm")
    proc = run_cli(tmp, *VLLM, join=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return tmp, proc


def test_console_has_no_vllm_noise(vllm_run):
    """vLLM's start-up warnings, its chat-template warm-up traceback and the per-step weight-load
    notices go to the workers' log files, not the console."""
    tmp, proc = vllm_run
    assert_console_is_readable(proc.stdout + proc.stderr)
    assert_console_shows_the_run(proc.stdout, read_metrics(tmp))
    worker_log = (tmp / "run" / "logs" / "actor_rollout_ref_rank0.log").read_text()
    assert "vllm" in worker_log.lower(), "the engine's own output is kept in the worker's log"


def test_rollout_runs_the_current_policy_and_reports_the_sync(vllm_run):
    rows = read_metrics(vllm_run[0])
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows[1:]:
        assert row["rollout/actor_logprob_abs_diff_max"] < 1e-4, row  # fp32 on CPU: ~1e-6
        assert row["rollout/actor_logprob_abs_diff_mean"] <= row["rollout/actor_logprob_abs_diff_max"]
        assert row["timing_s/gen"] > 0 and row["perf/rollout_tokens_per_s"] > 0
    for row in rows[1:]:  # on-policy: the update's own forward gave the old log-probs; ref in its call
        assert "timing_s/old_log_prob" not in row and row["timing_s/ref/compute_ref_log_prob"] > 0, row
        assert row["actor/ppo_kl"] == 0.0 and row["actor/kl_loss"] >= 0, row
    # step 1 rolls out with the weights synced for validation at step 0; step 2 follows an update
    assert rows[2]["timing_s/update_weights"] > 0 and rows[2]["perf/update_weights_gb"] > 0
    # the sync checked against the actor (rollout/weight_check.py), every parameter paired
    assert rows[2]["timing_s/weight_sync_verify"] > 0 and rows[2]["perf/weight_sync_unverified_params"] == 0
    assert 0 <= rows[2]["critic/score/mean"] <= 1 and rows[2]["actor/grad_norm"] > 0


def test_same_config_gives_identical_metrics_with_vllm(vllm_run, tmp_path):
    proc = run_cli(tmp_path, *VLLM, join=True)
    assert proc.returncode == 0, proc.stderr[-4000:]

    def stable(rows):
        return [{k: v for k, v in r.items() if not k.startswith(NONDETERMINISTIC)} for r in rows]

    assert stable(read_metrics(vllm_run[0])) == stable(read_metrics(tmp_path))


def test_tensor_parallel_rollout_matches_the_one_engine_per_rank_run(vllm_run, tmp_path):
    """TP=2: both workers run one engine together, on the prompts of both; same seeds, same samples."""
    with tp_engine_lock():  # no other TP engine of the suite runs meanwhile (tests/helpers/tp_lock.py)
        proc = run_cli(tmp_path, *VLLM, "actor_rollout_ref.rollout.tensor_model_parallel_size=2", join=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows, reference = read_metrics(tmp_path), read_metrics(vllm_run[0])
    assert rows[2]["perf/weight_sync_unverified_params"] == 0, "TP slices added up and paired"
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row, ref in zip(rows[1:], reference[1:]):
        assert row["rollout/actor_logprob_abs_diff_max"] < 1e-4, row
        assert all(math.isfinite(v) for k, v in row.items() if isinstance(v, float)), row
        for key in ("critic/score/mean", "response_length/mean"):
            assert row[key] == ref[key], (key, row[key], ref[key])
        assert row["actor/pg_loss"] == pytest.approx(ref["actor/pg_loss"], abs=1e-4)
