"""algorithm.rollout_correction end to end on 2 CPU workers (the HF rollout, fp32): decoupled mode with
token-level truncated IS and token_k2 rejection, as a verl user sets them. On CPU the rollout samples
the actor's own fp32 distribution, so the ratios are 1 up to kernel noise (~1e-6): the weights are 1,
and a rejection bound far below that noise rejects the tokens the noise touches (however many: a
run rejecting every token must survive too), with its metrics saying so. Bypass mode and the loss math: tests/workers/test_actor_rollout_corr.py,
tests/algos/test_rollout_corr.py."""

import math

from tests.test_main_ppo import SMALL, read_metrics, run_cli

RC = "algorithm.rollout_correction"


def test_decoupled_correction_weights_rejects_and_reports(tmp_path):
    overrides = [o for o in SMALL if not o.startswith("trainer.total_training_steps")]
    proc = run_cli(
        tmp_path,
        *overrides,
        "trainer.total_training_steps=1",
        "trainer.val_before_train=False",
        f"{RC}.rollout_is=token",
        f"{RC}.rollout_rs=token_k2",
        f"{RC}.rollout_rs_threshold=1e-16",
        join=True,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    (row,) = [r for r in read_metrics(tmp_path) if r["step"] == 1]
    assert row["timing_s/rollout_corr"] >= 0 and row["timing_s/old_log_prob"] >= 0, "its own phase"
    assert abs(row["rollout_corr/rollout_is_mean"] - 1) < 1e-4, "the HF rollout is the actor: ratio 1"
    rejected = row["rollout_corr/rollout_rs_masked_fraction"]
    assert 0 <= rejected <= 1 and rejected == row["rollout_corr/rollout_rs_token_k2_fraction_high"]
    assert row["rollout_corr/rollout_rs_token_k2_max"] < 1e-8, "noise: (log r)^2 / 2 of ~1e-6 ratios"
    # the off-policy diagnostics are the update's, as verl's actor reports them: the evolving policy
    # against the rollout's, averaged over micro-batches; the demo's second mini-batch follows a step
    assert 0 < abs(row["rollout_corr/kl"]) < 0.1
    assert all(math.isfinite(v) for k, v in row.items() if k.startswith("rollout_corr/")), row
