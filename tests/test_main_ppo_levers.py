"""The memory levers through the real CLI, with verl's key spellings: one 2-step PPO run (GAE, KL
loss against the reference) on 2 CPU workers with every lever on at once.

  actor + ref   Ulysses sequence parallelism over both workers (dp 1), fused log-probs, chunked
                entropy, activation offload, HSDP (fsdp_size 1: two replicas)
  critic        sequence parallelism, activation offload, HSDP

The HF rollout samples from the actor's own distribution, so the old log-probs the fused,
sequence-parallel pass computes must equal the rollout's (rollout/actor_logprob_abs_diff_max, fp32);
every metric must be finite and the activations' host traffic must show in the metrics.
"""

import math

import pytest

from tests.test_main_ppo import SMALL, read_metrics, run_cli

pytestmark = pytest.mark.slow

ARR = "actor_rollout_ref"
LEVERS = [
    "algorithm.adv_estimator=gae",
    f"{ARR}.actor.use_kl_loss=True",
    f"{ARR}.model.use_remove_padding=True",
    f"{ARR}.actor.ulysses_sequence_parallel_size=2",
    f"{ARR}.model.use_fused_kernels=True",
    f"{ARR}.actor.entropy_from_logits_with_chunking=True",
    f"{ARR}.model.enable_activation_offload=True",
    f"{ARR}.actor.fsdp_config.fsdp_size=1",
    f"{ARR}.ref.fsdp_config.fsdp_size=1",
    "critic.model.use_remove_padding=True",
    "critic.ulysses_sequence_parallel_size=2",
    "critic.model.enable_activation_offload=True",
    "critic.fsdp.fsdp_size=1",
    "critic.ppo_micro_batch_size_per_gpu=4",
]


def test_every_lever_at_once_trains_and_matches_the_rollouts_log_probs(tmp_path):
    proc = run_cli(tmp_path, *SMALL, *LEVERS, join=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows[1:]:
        bad = {k: v for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)}
        assert not bad, bad
        assert row["rollout/actor_logprob_abs_diff_max"] < 1e-4, row
        assert "actor/kl_loss" in row and "critic/vf_loss" in row
        for role in ("actor", "critic"):
            moved = row.get(f"perf/offload/{role}/update/activations/d2h_gb", 0)
            assert moved > 0, f"{role}: no activation traffic in {sorted(k for k in row if 'offload' in k)}"
