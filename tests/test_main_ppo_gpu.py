"""The CLI end to end on GPUs: Ray workers each holding an FSDP2 actor (NCCL) and an in-process vLLM
engine that sleeps between rollouts, on one or two devices. Run by scripts/gpu_check.sh where Ray and
vLLM are installed; deselected elsewhere (the `gpu` marker) and skipped without CUDA.

What only GPUs show: every rank's vLLM engine starts on the device Ray gave it (with two GPUs, rank 1
is the case a bundle-index LOCAL_RANK broke), vLLM's sleep mode releases its memory after each
rollout and the weights synced into the woken engine are the actor's: the rollout/actor log-prob diff
of the sampled tokens stays at kernel noise (fp32 throughout, as on CPU; a rollout one update behind
or with the random start-up weights differs by orders of magnitude more).
"""

import math

import pytest
import torch

from tests.test_main_ppo import SMALL, read_metrics, run_cli

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (scripts/gpu_check.sh)"),
]
pytest.importorskip("vllm", reason="the vLLM rollout needs vllm")
pytest.importorskip("ray", reason="the end-to-end run needs ray")

GPUS = min(2, torch.cuda.device_count()) if torch.cuda.is_available() else 0
GPU_RUN = [
    o for o in SMALL if not o.startswith(("trainer.n_gpus_per_node=", "actor_rollout_ref.rollout.name="))
]
GPU_RUN += [
    "trainer.device=cuda",
    f"trainer.n_gpus_per_node={GPUS}",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.free_cache_engine=true",  # sleep level 2 after each rollout
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
    "actor_rollout_ref.rollout.dtype=fp32",  # the demo's: fp32 actor, ref and rollout
]
# Kernel noise between vLLM's and the actor's fp32 forwards on a GPU; a stale rollout is >1e-2
# (tests/rollout: ~4 nats with the dummy weights). Not yet measured on a GPU (none was lent).
MAX_DIFF, MEAN_DIFF = 1e-2, 1e-3


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli_gpu")
    # vLLM's sleep reports what it freed at INFO; the workers otherwise run vLLM at WARNING
    # (rollout/engine_state.py sets that only where the variable is unset)
    proc = run_cli(tmp, *GPU_RUN, timeout=280, env={"VLLM_LOGGING_LEVEL": "INFO"})  # gpu_check.sh: 300 s
    assert proc.returncode == 0, proc.stderr[-4000:]
    return tmp


def test_every_rollout_samples_the_actors_current_weights(gpu_run):
    rows = read_metrics(gpu_run)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows[1:]:
        assert row["rollout/actor_logprob_abs_diff_max"] < MAX_DIFF, row
        assert row["rollout/actor_logprob_abs_diff_mean"] < MEAN_DIFF, row
        assert all(math.isfinite(v) for v in row.values() if isinstance(v, float)), row
    # step 2 rolls out after an update: the weights were synced into the woken engine
    assert rows[2]["timing_s/update_weights"] > 0 and rows[2]["perf/update_weights_gb"] > 0
    assert rows[2]["actor/grad_norm"] > 0


def test_every_ranks_engine_slept_after_its_rollouts(gpu_run):
    """(That every rank's engine started at all is the run's exit status.) Sleeps: after start-up and
    after each step's rollout; validation before training and step 1's rollout share one wake-up."""
    for rank in range(GPUS):
        log = (gpu_run / "run" / "logs" / f"actor_rollout_ref_rank{rank}.log").read_text()
        assert log.count("Sleep mode freed") >= 2, (
            f"rank {rank}: vLLM did not release its memory each rollout"
        )
