"""Offload modes: where an engine's sharded params, grads and optimizer state live, and when they move.

  none    everything stays on the device.
  manual  `param_offload` / `optimizer_offload`: sharded params are copied to host memory when a
          phase ends and back when the next begins. Optimizer state lives on the host and the step
          is streamed: one FSDP unit (a decoder layer, then the root's params) at a time brings its
          moments to the device, steps, and sends them back, so the device never holds more than
          one unit's optimizer state. Every copy is timed and its bytes counted, per phase.
  policy  `offload_policy`: FSDP2's CPUOffloadPolicy. Sharded params, grads and optimizer state live
          on the host; FSDP2 copies a layer's shard to the device for each unshard, copies each
          reduced grad shard back, and the optimizer steps on the host. These copies happen inside
          FSDP2, so they are counted from its copy schedule (a shard per unshard, a grad shard per
          reduce-scatter), not timed.

The mode is chosen once, when the engine is built (`build_offload`); the engine calls the same
hooks whatever the mode, so no flag is tested anywhere else.

On a CPU-only machine the device *is* the host. Manual moves are then still real copies into new
storage, so the path that matters for exactness (re-binding FSDP2's sharded params, optimizer-state
round trips) runs and is tested, but no memory is saved; docs/offload.md says so.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.fsdp import OffloadPolicy
from torch.distributed.tensor import DTensor

from verl_lite.utils import device as dev

GB = 1024**3
HOST = torch.device("cpu")


@dataclass
class Transfer:
    h2d_bytes: int = 0
    d2h_bytes: int = 0
    h2d_s: float = 0.0
    d2h_s: float = 0.0
    timed: bool = True  # False: counted from FSDP2's schedule, not measured


class TransferLog:
    """Bytes and seconds moved per phase, since the last `pop`."""

    def __init__(self):
        self.by_phase: dict[str, Transfer] = defaultdict(Transfer)

    def add(self, phase: str, to_device: bool, nbytes: int, seconds: float = 0.0, timed: bool = True) -> None:
        t = self.by_phase[phase]
        t.timed = timed
        if to_device:
            t.h2d_bytes, t.h2d_s = t.h2d_bytes + nbytes, t.h2d_s + seconds
        else:
            t.d2h_bytes, t.d2h_s = t.d2h_bytes + nbytes, t.d2h_s + seconds

    def pop(self) -> dict[str, Transfer]:
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


def _shard_bytes(tensors) -> int:
    total = 0
    for t in tensors:
        local = t.to_local() if isinstance(t, DTensor) else t
        total += local.numel() * local.element_size()
    return total


def _copy(t: torch.Tensor, target: torch.device, pin: bool) -> torch.Tensor:
    """A copy of `t` in new storage on `target` (pinned when it lands on the host and CUDA exists)."""
    if isinstance(t, DTensor):
        local = _copy(t.to_local(), target, pin)
        return DTensor.from_local(
            local, t.device_mesh, t.placements, run_check=False, shape=t.shape, stride=t.stride()
        )
    if pin and target.type == "cpu":
        return dev.empty(t.shape, t.dtype, HOST, pinned=True).copy_(t)
    return t.to(target, copy=True)


class NoOffload:
    """Everything on the device; the base of the other modes."""

    name = "none"

    def __init__(self, device: torch.device, log: TransferLog):
        self.device, self.log = device, log

    def fsdp_policy(self) -> OffloadPolicy:
        return OffloadPolicy()

    def place(self, module: nn.Module) -> None:
        """Put the freshly sharded module where this mode keeps it."""
        module.to(self.device)

    def attach(self, module: nn.Module, optimizer, units: list[nn.Module]) -> None:
        """`units`: the submodules with their own fully_shard, in forward order."""
        self.module, self.optimizer = module, optimizer

    def enter_phase(self, phase: str) -> None:
        pass

    def exit_phase(self, phase: str) -> None:
        pass

    def step(self, phase: str) -> None:
        self.optimizer.step()

    def on_forward(self, training: bool) -> None:
        pass

    def on_grad_reduce(self) -> None:
        pass

    def after_load(self) -> None:
        """A checkpoint's optimizer state was just loaded next to the params: put it where this mode
        keeps it."""


class ManualOffload(NoOffload):
    """param_offload / optimizer_offload: timed copies at phase boundaries and around the step."""

    name = "manual"

    def __init__(self, device: torch.device, log: TransferLog, params: bool, optimizer: bool):
        super().__init__(device, log)
        self.params, self.optim = params, optimizer
        self.pin = dev.can_pin_memory()

    def attach(self, module: nn.Module, optimizer, units: list[nn.Module]) -> None:
        super().attach(module, optimizer, units)
        if self.params:  # params live on the host between phases, starting now
            self._move_params(False, "init")
        seen: set[int] = set()
        self.param_chunks = []
        for unit in [*units, module]:  # the root last: what no layer claimed
            chunk = [p for p in unit.parameters() if id(p) not in seen]
            seen.update(id(p) for p in chunk)
            if chunk:
                self.param_chunks.append(chunk)

    def _timed(self, phase: str, to_device: bool, nbytes: int, fn) -> None:
        dev.synchronize()
        start = time.perf_counter()
        fn()
        dev.synchronize()
        self.log.add(phase, to_device, nbytes, time.perf_counter() - start)

    # the direction is explicit: on a CPU-only machine device and host are the same torch.device
    def _move_params(self, to_device: bool, phase: str) -> None:
        target = self.device if to_device else HOST
        nbytes = _shard_bytes(self.module.parameters())
        # FSDPModule._apply re-registers the sharded params, so FSDP2 and the optimizer keep working
        self._timed(
            phase, to_device, nbytes, lambda: self.module._apply(lambda t: _copy(t, target, self.pin))
        )

    def _move_optimizer(self, params: list, to_device: bool, phase: str) -> None:
        target = self.device if to_device else HOST
        states = [self.optimizer.state[p] for p in params if p in self.optimizer.state]
        tensors = [(s, k) for s in states for k, v in s.items() if torch.is_tensor(v) and v.dim() > 0]
        nbytes = _shard_bytes(s[k] for s, k in tensors)

        def move():
            for s, k in tensors:
                s[k] = _copy(s[k], target, self.pin)

        self._timed(phase, to_device, nbytes, move)

    def enter_phase(self, phase: str) -> None:
        if self.params:
            self._move_params(True, phase)

    def exit_phase(self, phase: str) -> None:
        if self.params:
            self._move_params(False, phase)

    def after_load(self) -> None:
        if self.optim:
            self._move_optimizer([p for chunk in self.param_chunks for p in chunk], False, "load_checkpoint")

    def step(self, phase: str) -> None:
        if not self.optim:
            self.optimizer.step()
            return
        # AdamW skips params without a grad, so hiding the other chunks' grads steps one chunk;
        # each param is stepped exactly once with the same group settings: the same update
        grads = {p: p.grad for chunk in self.param_chunks for p in chunk}
        for chunk in self.param_chunks:
            for p in grads:
                p.grad = None
            for p in chunk:
                p.grad = grads[p]
            self._move_optimizer(chunk, True, phase)
            self.optimizer.step()  # the first step creates the state, on the params' device
            self._move_optimizer(chunk, False, phase)
        for p, g in grads.items():
            p.grad = g


class PolicyOffload(NoOffload):
    """FSDP2 CPUOffloadPolicy; copies are FSDP2's own, counted from its schedule."""

    name = "policy"

    def __init__(self, device: torch.device, log: TransferLog, reshard_after_forward: bool):
        super().__init__(device, log)
        self.reshard_after_forward = reshard_after_forward

    def fsdp_policy(self) -> OffloadPolicy:
        return dev.cpu_offload_policy()

    def place(self, module: nn.Module) -> None:
        # sharded params stay on the host (FSDP2 owns them); only buffers (e.g. rotary tables) go to the device
        for sub in module.modules():
            for name, buf in sub._buffers.items():
                if buf is not None:
                    sub._buffers[name] = buf.to(self.device)

    def attach(self, module: nn.Module, optimizer, units: list[nn.Module]) -> None:
        super().attach(module, optimizer, units)
        self.shard_bytes = _shard_bytes(module.parameters())
        # only trained params have grads to reduce (LoRA: the adapters, not the frozen base)
        self.grad_shard_bytes = _shard_bytes(p for p in module.parameters() if p.requires_grad)
        self.phase = "init"

    def enter_phase(self, phase: str) -> None:
        self.phase = phase

    def on_forward(self, training: bool) -> None:
        # each forward gathers every shard once; with reshard_after_forward, backward gathers again
        repeats = 2 if training and self.reshard_after_forward else 1
        self.log.add(self.phase, True, repeats * self.shard_bytes, timed=False)

    def on_grad_reduce(self) -> None:
        self.log.add(self.phase, False, self.grad_shard_bytes, timed=False)


def build_offload(fsdp_cfg, device: torch.device, log: TransferLog) -> NoOffload:
    """The engine's offload mode from its fsdp_config (notices about combinations are logged by
    config/validate.py, once, on the driver)."""
    if fsdp_cfg.gradient_offload and not fsdp_cfg.offload_policy:
        raise ValueError("fsdp_config.gradient_offload=True needs fsdp_config.offload_policy=True in FSDP2")
    if fsdp_cfg.offload_policy:
        return PolicyOffload(device, log, fsdp_cfg.reshard_after_forward)
    if fsdp_cfg.param_offload or fsdp_cfg.optimizer_offload:
        return ManualOffload(device, log, fsdp_cfg.param_offload, fsdp_cfg.optimizer_offload)
    return NoOffload(device, log)
