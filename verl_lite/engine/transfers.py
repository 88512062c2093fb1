"""What the offload modes and activation offload move: bytes and seconds per phase, and their metrics.

Every host<->device copy an engine makes is recorded in its TransferLog, per phase: copies made on the
host's clock are timed inline; copies queued on a side stream are timed by a pair of device events
whose seconds are read when the metrics are taken, all with one wait (`add_events`, `pop`), so a copy
never makes the host wait for the device. FSDP2's own copies under offload_policy are counted from
its schedule (`timed=False`), not timed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from verl_lite.utils import device as dev

GB = 1024**3


@dataclass
class Transfer:
    h2d_bytes: int = 0
    d2h_bytes: int = 0
    h2d_s: float = 0.0
    d2h_s: float = 0.0
    timed: bool = True  # False: counted from FSDP2's schedule, not measured


class TransferLog:
    """Bytes and seconds moved per phase, since the last `pop`. Copies queued on a side stream are
    timed by a pair of device events (`add_events`) whose seconds are read at `pop`, all with one
    wait: the copies themselves never wait for the host."""

    def __init__(self):
        self.by_phase: dict[str, Transfer] = defaultdict(Transfer)
        self.pending: list[tuple[str, bool, int, object, object]] = []

    def add(self, phase: str, to_device: bool, nbytes: int, seconds: float = 0.0, timed: bool = True) -> None:
        t = self.by_phase[phase]
        t.timed = timed
        if to_device:
            t.h2d_bytes, t.h2d_s = t.h2d_bytes + nbytes, t.h2d_s + seconds
        else:
            t.d2h_bytes, t.d2h_s = t.d2h_bytes + nbytes, t.d2h_s + seconds

    def add_events(self, phase: str, to_device: bool, nbytes: int, start, stop) -> None:
        """A copy timed by device events recorded around it (utils/device.timing_event)."""
        self.pending.append((phase, to_device, nbytes, start, stop))

    def pop(self) -> dict[str, Transfer]:
        pending, self.pending = self.pending, []
        seconds = dev.elapsed_many([(start, stop) for *_, start, stop in pending])
        for (phase, to_device, nbytes, _, _), s in zip(pending, seconds):
            self.add(phase, to_device, nbytes, s)
        out, self.by_phase = dict(self.by_phase), defaultdict(Transfer)
        return out


def offload_metrics(by_role: dict[str, dict[str, Transfer]]) -> dict[str, float]:
    """Metrics for the moves of several engines (role -> phase -> Transfer).

    Timed (manual) moves: perf/offload/{h2d,d2h}_gb, perf/offload/{h2d,d2h}_gbps, timing_s/reload
    (host->device seconds), timing_s/offload (device->host seconds), and the same per role and phase
    under perf/offload/<role>/<phase>/. Counted (offload_policy) copies: perf/offload/policy_{h2d,d2h}_gb.
    """
    out: dict[str, float] = {}
    total = Transfer()
    policy_h2d = policy_d2h = 0
    for role, phases in by_role.items():
        for phase, t in phases.items():
            if not t.timed:
                policy_h2d, policy_d2h = policy_h2d + t.h2d_bytes, policy_d2h + t.d2h_bytes
                continue
            prefix = f"perf/offload/{role}/{phase}"
            out[f"{prefix}/h2d_gb"], out[f"{prefix}/d2h_gb"] = t.h2d_bytes / GB, t.d2h_bytes / GB
            out[f"{prefix}/h2d_s"], out[f"{prefix}/d2h_s"] = t.h2d_s, t.d2h_s
            total.h2d_bytes, total.d2h_bytes = total.h2d_bytes + t.h2d_bytes, total.d2h_bytes + t.d2h_bytes
            total.h2d_s, total.d2h_s = total.h2d_s + t.h2d_s, total.d2h_s + t.d2h_s
    out["perf/offload/h2d_gb"], out["perf/offload/d2h_gb"] = total.h2d_bytes / GB, total.d2h_bytes / GB
    out["timing_s/reload"], out["timing_s/offload"] = total.h2d_s, total.d2h_s
    if total.h2d_s > 0:
        out["perf/offload/h2d_gbps"] = total.h2d_bytes / GB / total.h2d_s
    if total.d2h_s > 0:
        out["perf/offload/d2h_gbps"] = total.d2h_bytes / GB / total.d2h_s
    if policy_h2d or policy_d2h:
        out["perf/offload/policy_h2d_gb"], out["perf/offload/policy_d2h_gb"] = (
            policy_h2d / GB,
            policy_d2h / GB,
        )
    return out
