"""Health hints from hand-made metric dicts: ranges, the key each hint names, no repetition."""

from verl_lite.config.schema import ActorConfig
from verl_lite.trainer.health import HealthMonitor, RunShape, run_shape

GPU_NONE = RunShape(on_gpu=True, offload="none", micro=4)
GPU_POLICY = RunShape(on_gpu=True, offload="policy", micro=4)
HEALTHY = {
    "perf/max_memory_reserved_gb": 64.0,
    "perf/device_memory_total_gb": 80.0,  # 80%
    "perf/device_utilization": 93.0,
    "perf/offload/h2d_gbps": 20.0,
    "perf/link_peak_gbps": 25.0,
    "timing_s/step": 10.0,
    "timing_s/offload": 0.5,
    "timing_s/reload": 0.5,
    "perf/throughput": 1000.0,
}


def test_a_healthy_step_says_nothing():
    assert HealthMonitor(GPU_NONE).check(HEALTHY) == []


def test_memory_over_90_percent_without_offload_names_micro_and_param_offload():
    (line,) = HealthMonitor(GPU_NONE).check(HEALTHY | {"perf/max_memory_reserved_gb": 76.0})
    assert "95% of 80.0 GB (healthy 70%-90%)" in line
    assert "lower actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in line
    assert "enable actor_rollout_ref.actor.fsdp_config.param_offload" in line


def test_memory_under_70_percent_with_offload_policy_says_disable_it():
    (line,) = HealthMonitor(GPU_POLICY).check(HEALTHY | {"perf/max_memory_reserved_gb": 20.0})
    assert "25% of 80.0 GB" in line and "offload_policy=False" in line


def test_memory_under_70_percent_without_offload_says_raise_micro():
    (line,) = HealthMonitor(GPU_NONE).check(HEALTHY | {"perf/max_memory_reserved_gb": 20.0})
    assert "raise actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in line


def test_low_utilisation_with_offload_policy_says_disable_gradient_offload():
    (line,) = HealthMonitor(GPU_POLICY).check(HEALTHY | {"perf/device_utilization": 41.0})
    assert "utilisation 41% (healthy > 80%)" in line and "disable gradient offload" in line


def test_slow_link_and_large_offload_share_each_name_param_offload():
    lines = HealthMonitor(GPU_NONE).check(HEALTHY | {"perf/offload/h2d_gbps": 5.0, "timing_s/reload": 3.0})
    assert len(lines) == 2
    assert "5.0 GB/s, 20% of the measured link peak 25.0 GB/s" in lines[0]
    assert "offload moves take 35% of the step" in lines[1]
    assert all("fsdp_config.param_offload" in x for x in lines)


def test_a_hint_is_said_once_then_again_on_change_and_on_recovery():
    monitor = HealthMonitor(GPU_NONE)
    hot = HEALTHY | {"perf/max_memory_reserved_gb": 76.0}
    assert len(monitor.check(hot)) == 1
    assert monitor.check(hot | {"perf/max_memory_reserved_gb": 77.0}) == [], "same advice: quiet"
    (changed,) = monitor.check(HEALTHY | {"perf/max_memory_reserved_gb": 30.0})
    assert "raise" in changed
    assert monitor.check(HEALTHY) == ["health: memory back in the healthy range"]
    assert monitor.check(HEALTHY) == []


def test_cpu_run_says_once_which_checks_do_not_apply():
    monitor = HealthMonitor(run_shape(ActorConfig(), on_gpu=False))
    first = monitor.check(HEALTHY | {"perf/max_memory_reserved_gb": 79.0, "perf/device_utilization": 5.0})
    assert len(first) == 1 and "CPU-only run" in first[0] and "do not apply" in first[0]
    (share,) = monitor.check(HEALTHY | {"timing_s/offload": 4.0})
    assert "offload moves take 45% of the step" in share


def test_run_shape_reads_the_offload_mode():
    cfg = ActorConfig(ppo_micro_batch_size_per_gpu=32)
    assert run_shape(cfg, True) == RunShape(True, "none", 32)
    cfg.fsdp_config.optimizer_offload = True
    assert run_shape(cfg, True).offload == "manual"
    cfg.fsdp_config.offload_policy, cfg.use_dynamic_bsz = True, True
    assert run_shape(cfg, True) == RunShape(True, "policy", None)


def test_throughput_under_half_the_best_names_dynamic_bsz():
    monitor = HealthMonitor(GPU_NONE)
    assert monitor.check(HEALTHY | {"perf/throughput": 2000.0}) == []
    assert monitor.check(HEALTHY | {"perf/throughput": 1200.0}) == [], "60% of the best is within range"
    (line,) = monitor.check(HEALTHY | {"perf/throughput": 900.0})
    assert (
        "throughput 900 tokens/s is under 50% of this run's best 2000" in line
        and "use_dynamic_bsz=True" in line
    )
