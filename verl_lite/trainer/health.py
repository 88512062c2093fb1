"""Health hints: each step's metrics against healthy ranges, and which config key to change.

Pure decisions on a metrics dict (the step's, as logged), so they are tested with hand-made dicts:

  memory        perf/max_memory_reserved_gb / perf/device_memory_total_gb within 70-90%
  utilisation   perf/device_utilization (NVML) above 80%
  link          timed offload copies (perf/offload/h2d_gbps) at least half the measured link peak
                (perf/link_peak_gbps, utils/device.measure_link_gbps)
  offload share timing_s/offload + timing_s/reload at most a quarter of timing_s/step
  throughput    perf/throughput at least half the best step so far (a drop usually means longer
                responses packed into fixed micro-batches)

When one is out of range, one line names the key to change. A hint is said once a change has held
for SUSTAIN steps in a row (a new advice, or the value back in range): one noisy step on a shared
machine says nothing, and the step loop stays quiet otherwise.
On a CPU-only run the device is the host, so memory, utilisation and link do not apply: the first
check says so once and only the offload share and throughput are checked.
"""

from __future__ import annotations

from dataclasses import dataclass

ACTOR = "actor_rollout_ref.actor"
MEMORY_RANGE = (0.70, 0.90)
MIN_UTILIZATION = 80.0
MIN_LINK_FRACTION = 0.5
MAX_OFFLOAD_SHARE = 0.25
MIN_THROUGHPUT_FRACTION = 0.5
SUSTAIN = 3  # steps a change must hold before it is said


@dataclass(frozen=True)
class RunShape:
    """What the advice depends on: where the run computes and how the actor offloads."""

    on_gpu: bool
    offload: str  # none | manual | policy
    micro: int | None  # ppo_micro_batch_size_per_gpu (None with use_dynamic_bsz)


@dataclass(frozen=True)
class Hint:
    check: str
    advice: str  # identifies the hint: the same advice is not repeated
    message: str


def _memory(m: dict, run: RunShape) -> Hint | None:
    used, total = m.get("perf/max_memory_reserved_gb"), m.get("perf/device_memory_total_gb")
    if used is None or not total:
        return None
    frac = used / total
    low, high = MEMORY_RANGE
    head = f"device memory peaked at {frac:.0%} of {total:.1f} GB (healthy {low:.0%}-{high:.0%})"
    if frac > high:
        if run.offload == "none":
            return Hint(
                "memory",
                "lower micro / param_offload",
                f"{head}: lower {ACTOR}.ppo_micro_batch_size_per_gpu"
                f" or enable {ACTOR}.fsdp_config.param_offload and optimizer_offload",
            )
        return Hint(
            "memory",
            "lower micro",
            f"{head}: lower {ACTOR}.ppo_micro_batch_size_per_gpu "
            f"(or enable actor_rollout_ref.model.enable_gradient_checkpointing)",
        )
    if frac < low:
        if run.offload == "policy":
            return Hint(
                "memory",
                "disable policy",
                f"{head}: room to spare; set {ACTOR}.fsdp_config.offload_policy=False "
                "(use param_offload / optimizer_offload if needed) to stop per-layer host copies",
            )
        if run.offload == "manual":
            return Hint(
                "memory",
                "disable manual",
                f"{head}: room to spare; disable {ACTOR}.fsdp_config.param_offload "
                "and optimizer_offload to stop the phase-boundary copies",
            )
        return Hint("memory", "raise micro", f"{head}: raise {ACTOR}.ppo_micro_batch_size_per_gpu to use it")
    return None


def _utilization(m: dict, run: RunShape) -> Hint | None:
    util = m.get("perf/device_utilization")
    if util is None or util >= MIN_UTILIZATION:
        return None
    head = f"device utilisation {util:.0f}% (healthy > {MIN_UTILIZATION:.0f}%)"
    if run.offload == "policy":
        return Hint(
            "utilisation",
            "disable gradient offload",
            f"{head}: the device waits on host copies; disable "
            f"gradient offload ({ACTOR}.fsdp_config.offload_policy=False, gradient_offload=False) if memory allows",
        )
    return Hint(
        "utilisation",
        "raise micro",
        f"{head}: give it more work per step: raise "
        f"{ACTOR}.ppo_micro_batch_size_per_gpu (or set {ACTOR}.use_dynamic_bsz=True)",
    )


def _link(m: dict, run: RunShape) -> Hint | None:
    speed, peak = m.get("perf/offload/h2d_gbps"), m.get("perf/link_peak_gbps")
    if speed is None or not peak or speed >= MIN_LINK_FRACTION * peak:
        return None
    return Hint(
        "link",
        "disable param_offload",
        f"host->device copies at {speed:.1f} GB/s, {speed / peak:.0%} of the "
        f"measured link peak {peak:.1f} GB/s: the moves are small or unpinned; disable "
        f"{ACTOR}.fsdp_config.param_offload if memory allows (optimizer_offload moves larger tensors)",
    )


def _offload_share(m: dict, run: RunShape) -> Hint | None:
    step = m.get("timing_s/step")
    moves = m.get("timing_s/offload", 0.0) + m.get("timing_s/reload", 0.0)
    if not step or moves <= MAX_OFFLOAD_SHARE * step:
        return None
    return Hint(
        "offload share",
        "disable param_offload",
        f"offload moves take {moves / step:.0%} of the step "
        f"({moves:.2f} of {step:.2f} s, healthy <= {MAX_OFFLOAD_SHARE:.0%}): disable "
        f"{ACTOR}.fsdp_config.param_offload (params stay on the device) if memory allows",
    )


def _throughput(m: dict, run: RunShape, best: float) -> Hint | None:
    now = m.get("perf/throughput")
    if now is None or not best or now >= MIN_THROUGHPUT_FRACTION * best:
        return None
    return Hint(
        "throughput",
        "dynamic bsz",
        f"throughput {now:.0f} tokens/s is under {MIN_THROUGHPUT_FRACTION:.0%} "
        f"of this run's best {best:.0f}: if responses grew longer, set {ACTOR}.use_dynamic_bsz=True "
        f"(token-budgeted micro-batches, {ACTOR}.ppo_max_token_len_per_gpu)",
    )


GPU_CHECKS = {"memory": _memory, "utilisation": _utilization, "link": _link}
HOST_CHECKS = {"offload share": _offload_share}


class HealthMonitor:
    """`check(metrics)` -> the lines to log for this step (usually none)."""

    def __init__(self, run: RunShape):
        self.run = run
        self.said: dict[str, str | None] = {}  # check -> advice last given (None: healthy)
        self.pending: dict[str, tuple[str | None, int]] = {}  # check -> (new advice, steps it has held)
        self.announced = False
        self.best_throughput = 0.0

    def check(self, metrics: dict) -> list[str]:
        lines = []
        if not self.run.on_gpu and not self.announced:
            lines.append(
                "health: CPU-only run: device memory, utilisation and host-link checks do not apply "
                "(the device is the host); checking the offload share of step time and throughput only"
            )
        self.announced = True
        checks = {**(GPU_CHECKS if self.run.on_gpu else {}), **HOST_CHECKS}
        best = self.best_throughput
        checks["throughput"] = lambda m, run: _throughput(m, run, best)
        self.best_throughput = max(best, metrics.get("perf/throughput", 0.0))
        for name, fn in checks.items():
            line = self._sustained(name, fn(metrics, self.run))
            if line:
                lines.append(line)
        return lines

    def _sustained(self, name: str, hint: Hint | None) -> str | None:
        """The line for check `name` once its new state has held SUSTAIN steps, else None."""
        advice = hint.advice if hint else None
        if advice == self.said.get(name):
            self.pending.pop(name, None)
            return None
        previous, held = self.pending.get(name, (advice, 0))
        held = held + 1 if previous == advice else 1
        self.pending[name] = (advice, held)
        if held < SUSTAIN:
            return None
        del self.pending[name]
        self.said[name] = advice
        return f"health: {hint.message}" if hint else f"health: {name} back in the healthy range"


def run_shape(actor_cfg, on_gpu: bool) -> RunShape:
    """RunShape from actor_rollout_ref.actor (after auto_offload applied its choice)."""
    fsdp = actor_cfg.fsdp_config
    offload = (
        "policy"
        if fsdp.offload_policy
        else "manual"
        if fsdp.param_offload or fsdp.optimizer_offload
        else "none"
    )
    return RunShape(
        on_gpu, offload, None if actor_cfg.use_dynamic_bsz else actor_cfg.ppo_micro_batch_size_per_gpu
    )
