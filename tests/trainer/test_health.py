"""Health hints from hand-made metric dicts: ranges, the key each hint names, said only once a change
has held SUSTAIN steps, no repetition."""

from verl_lite.config.schema import ActorConfig
from verl_lite.trainer.health import SUSTAIN, HealthMonitor, RunShape, run_shape

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


def held(monitor: HealthMonitor, metrics: dict) -> list[str]:
    """The lines of SUSTAIN steps of `metrics`: all said on the last one."""
    for _ in range(SUSTAIN - 1):
        assert monitor.check(metrics) == [], "said before the change held SUSTAIN steps"
    return monitor.check(metrics)


def said(run: RunShape, metrics: dict) -> list[str]:
    return held(HealthMonitor(run), metrics)


def test_a_healthy_step_says_nothing():
    assert said(GPU_NONE, HEALTHY) == []


def test_memory_over_90_percent_without_offload_names_micro_and_param_offload():
    (line,) = said(GPU_NONE, HEALTHY | {"perf/max_memory_reserved_gb": 76.0})
    assert "95% of 80.0 GB (healthy 70%-90%)" in line
    assert "lower actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in line
    assert "enable actor_rollout_ref.actor.fsdp_config.param_offload" in line


def test_memory_under_70_percent_with_offload_policy_says_disable_it():
    (line,) = said(GPU_POLICY, HEALTHY | {"perf/max_memory_reserved_gb": 20.0})
    assert "25% of 80.0 GB" in line and "offload_policy=False" in line


def test_memory_under_70_percent_without_offload_says_raise_micro():
    (line,) = said(GPU_NONE, HEALTHY | {"perf/max_memory_reserved_gb": 20.0})
    assert "raise actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in line


def test_low_utilisation_with_offload_policy_says_disable_gradient_offload():
    (line,) = said(GPU_POLICY, HEALTHY | {"perf/device_utilization": 41.0})
    assert "utilisation 41% (healthy > 80%)" in line and "disable gradient offload" in line


def test_slow_link_and_large_offload_share_each_name_param_offload():
    lines = said(GPU_NONE, HEALTHY | {"perf/offload/h2d_gbps": 5.0, "timing_s/reload": 3.0})
    assert len(lines) == 2
    assert "5.0 GB/s, 20% of the measured link peak 25.0 GB/s" in lines[0]
    assert "offload moves take 35% of the step" in lines[1]
    assert all("fsdp_config.param_offload" in x for x in lines)


def test_a_hint_is_said_once_then_again_on_change_and_on_recovery():
    monitor = HealthMonitor(GPU_NONE)
    hot = HEALTHY | {"perf/max_memory_reserved_gb": 76.0}
    assert len(held(monitor, hot)) == 1
    assert monitor.check(hot | {"perf/max_memory_reserved_gb": 77.0}) == [], "same advice: quiet"
    (changed,) = held(monitor, HEALTHY | {"perf/max_memory_reserved_gb": 30.0})
    assert "raise" in changed
    assert held(monitor, HEALTHY) == ["health: memory back in the healthy range"]
    assert monitor.check(HEALTHY) == []


def test_noisy_steps_say_nothing_until_a_change_holds():
    """A shared machine: single slow steps, or a value flipping every step or two, are not a change."""
    monitor = HealthMonitor(GPU_NONE)
    slow = HEALTHY | {"perf/throughput": 400.0}
    noisy = [HEALTHY, slow, HEALTHY, slow, slow, HEALTHY, slow, HEALTHY, HEALTHY, slow, slow, HEALTHY]
    assert [line for m in noisy for line in monitor.check(m)] == []
    (line,) = held(monitor, slow)
    assert "throughput 400 tokens/s" in line
    assert monitor.check(HEALTHY) == [] and monitor.check(slow) == [], "one good step is not a recovery"
    assert held(monitor, HEALTHY) == ["health: throughput back in the healthy range"]


def test_cpu_run_says_once_which_checks_do_not_apply():
    monitor = HealthMonitor(run_shape(ActorConfig(), on_gpu=False))
    first = monitor.check(HEALTHY | {"perf/max_memory_reserved_gb": 79.0, "perf/device_utilization": 5.0})
    assert len(first) == 1 and "CPU-only run" in first[0] and "do not apply" in first[0]
    (share,) = held(monitor, HEALTHY | {"timing_s/offload": 4.0})
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
    assert held(monitor, HEALTHY | {"perf/throughput": 1200.0}) == [], "60% of the best is within range"
    (line,) = held(monitor, HEALTHY | {"perf/throughput": 900.0})
    assert (
        "throughput 900 tokens/s is under 50% of this run's best 2000" in line
        and "use_dynamic_bsz=True" in line
    )
