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

On a CPU-only machine the device *is* the host. Manual moves are then still real copies (params'
storage freed and re-allocated, optimizer state re-bound to fresh copies), so the path that matters
for exactness runs and is tested, but no memory is saved; docs/offload.md says so.

Pinned host memory: manual moves copy into exactly sized, page-locked HostBuffers
(utils/device.py), `pinned_bytes()` says how many; offload_policy's pinning is FSDP2's own, through
torch's caching host allocator, rounded to powers of two (utils/device.py's docstring says what
that costs; `dev.pinned_host_bytes()` reports it).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict
from torch.distributed.fsdp import OffloadPolicy
from torch.distributed.tensor import DTensor

from verl_lite.engine.optim import zero_adamw_state
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


def _shard_bytes(tensors) -> int:
    total = 0
    for t in tensors:
        local = t.to_local() if isinstance(t, DTensor) else t
        total += local.numel() * local.element_size()
    return total


def _as_bytes(storage: torch.UntypedStorage) -> torch.Tensor:
    """A flat uint8 tensor over `storage`'s memory (no copy)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _like(t: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    """`local` in `t`'s place: wrapped as a DTensor with t's sharding when t is one."""
    if isinstance(t, DTensor):
        return DTensor.from_local(
            local, t.device_mesh, t.placements, run_check=False, shape=t.shape, stride=t.stride()
        )
    return local


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

    def init_optimizer_state(self) -> None:
        """Before a checkpoint's optimizer state is read: create the state where this mode keeps it
        (here nothing: torch creates it next to the params, with a zero-lr step)."""

    def load_optimizer_state(self, state: dict) -> None:
        """Install a checkpoint's optimizer state (`get_optimizer_state_dict`'s layout, read in place)."""
        set_optimizer_state_dict(self.module, self.optimizer, state)

    def pinned_bytes(self) -> int:
        """Host bytes this mode holds page-locked (HostBuffers; 0 without CUDA)."""
        return 0


class ManualOffload(NoOffload):
    """param_offload / optimizer_offload: timed copies at phase boundaries and around the step.

    Host copies live in `HostBuffer`s (utils/device.py): exactly their bytes, page-locked once, and
    reused by every move. Params stay the same objects throughout: leaving a phase copies each
    sharded param's storage to its host slot and frees the device storage (resize to 0, as FSDP2
    itself frees unsharded params); entering one re-allocates it and copies back. FSDP2 and the
    optimizer never see a new tensor. Optimizer state tensors are re-bound instead: they live as
    host tensors (views of their chunk's HostBuffer) and get device copies only around the step.
    """

    name = "manual"

    def __init__(self, device: torch.device, log: TransferLog, params: bool, optimizer: bool):
        super().__init__(device, log)
        self.params, self.optim = params, optimizer
        self.optim_homes: dict[int, dev.HostBuffer] = {}

    def attach(self, module: nn.Module, optimizer, units: list[nn.Module]) -> None:
        super().attach(module, optimizer, units)
        seen: set[int] = set()
        self.param_chunks = []
        for unit in [*units, module]:  # the root last: what no layer claimed
            chunk = [p for p in unit.parameters() if id(p) not in seen]
            seen.update(id(p) for p in chunk)
            chunk = [p for p in chunk if p.requires_grad]  # what the optimizer steps (not LoRA's base)
            if chunk:
                self.param_chunks.append(chunk)
        self.storages, ptrs = [], set()
        for p in module.parameters():
            storage = _local(p).untyped_storage()
            if storage.nbytes() and storage.data_ptr() not in ptrs:
                ptrs.add(storage.data_ptr())
                self.storages.append(storage)
        if self.params:  # params live on the host between phases, starting now
            self.param_home = dev.HostBuffer([s.nbytes() for s in self.storages])
            self._move_params(False, "init")

    def pinned_bytes(self) -> int:
        homes = [*self.optim_homes.values(), *([self.param_home] if self.params else [])]
        return sum(h.nbytes for h in homes if h.pinned)

    def _timed(self, phase: str, to_device: bool, nbytes: int, fn) -> None:
        dev.synchronize()
        start = time.perf_counter()
        fn()
        dev.synchronize()
        self.log.add(phase, to_device, nbytes, time.perf_counter() - start)

    # the direction is explicit: on a CPU-only machine device and host are the same torch.device
    def _move_params(self, to_device: bool, phase: str) -> None:
        home = self.param_home

        def move():
            for i, storage in enumerate(self.storages):
                if to_device:
                    storage.resize_(home.sizes[i])
                    _as_bytes(storage).copy_(home.slot(i), non_blocking=True)
                else:
                    home.slot(i).copy_(_as_bytes(storage), non_blocking=True)
                    storage.resize_(0)  # stream-ordered free: the copy above runs first

        self._timed(phase, to_device, sum(home.sizes), move)

    def _state_entries(self, chunk: list) -> list[tuple[dict, str]]:
        states = [self.optimizer.state[p] for p in chunk if p in self.optimizer.state]
        return [(s, k) for s in states for k, v in s.items() if torch.is_tensor(v) and v.dim() > 0]

    def _home(self, index: int, entries: list[tuple[dict, str]]) -> dev.HostBuffer:
        sizes = [_local(s[k]).numel() * _local(s[k]).element_size() for s, k in entries]
        if index not in self.optim_homes:
            self.optim_homes[index] = dev.HostBuffer(sizes)
        home = self.optim_homes[index]
        if home.sizes != sizes:
            raise RuntimeError(f"optimizer state of param chunk {index} changed its layout")
        return home

    def _move_optimizer(self, index: int, to_device: bool, phase: str) -> None:
        entries = self._state_entries(self.param_chunks[index])
        home = self._home(index, entries)

        def move():
            for j, (s, k) in enumerate(entries):
                local = _local(s[k])
                if to_device:  # a copy even where the device is the host: the step writes into it
                    s[k] = _like(s[k], local.to(self.device, copy=True, non_blocking=True))
                else:
                    host = home.view(j, local.shape, local.dtype)
                    s[k] = _like(s[k], host.copy_(local, non_blocking=True))

        self._timed(phase, to_device, sum(home.sizes), move)

    def enter_phase(self, phase: str) -> None:
        if self.params:
            self._move_params(True, phase)

    def exit_phase(self, phase: str) -> None:
        if self.params:
            self._move_params(False, phase)

    def init_optimizer_state(self) -> None:
        """Under optimizer_offload, AdamW's zero state is made directly in its host homes (torch's
        own way, a zero-lr step, would create all of it on the device at once)."""
        if not self.optim or self.optimizer.state:
            return
        for index, chunk in enumerate(self.param_chunks):
            for p in chunk:
                group = next(g for g in self.optimizer.param_groups if any(q is p for q in g["params"]))
                self.optimizer.state[p] = zero_adamw_state(group, p, lambda t: t)  # placeholders
            entries = self._state_entries(chunk)
            home = self._home(index, entries)
            home.data.zero_()
            for j, (s, k) in enumerate(entries):
                local = _local(s[k])
                s[k] = _like(s[k], home.view(j, local.shape, local.dtype))

    def load_optimizer_state(self, state: dict) -> None:
        if not self.optim:
            return super().load_optimizer_state(state)
        load_state_in_place(self.module, self.optimizer, state)

    def step(self, phase: str) -> None:
        if not self.optim:
            self.optimizer.step()
            return
        # AdamW skips params without a grad, so hiding the other chunks' grads steps one chunk;
        # each param is stepped exactly once with the same group settings: the same update
        grads = {p: p.grad for chunk in self.param_chunks for p in chunk}
        for index, chunk in enumerate(self.param_chunks):
            for p in grads:
                p.grad = None
            for p in chunk:
                p.grad = grads[p]
            if self._state_entries(chunk):
                self._move_optimizer(index, True, phase)
            self.optimizer.step()  # the first step creates the state, on the params' device
            self._move_optimizer(index, False, phase)
        for p, g in grads.items():
            p.grad = g


def load_state_in_place(module: nn.Module, optimizer, state: dict) -> None:
    """A checkpoint's optimizer state (FQN-keyed, as `get_optimizer_state_dict` lays it out) into
    the optimizer's existing state tensors, wherever they live, and its hyper-parameters into the
    param groups. `set_optimizer_state_dict` would instead cast every state tensor to its param's
    device (Optimizer.load_state_dict), all of them at once."""
    params = dict(module.named_parameters())
    for fqn, loaded in state["state"].items():
        if fqn not in params:
            raise KeyError(f"optimizer checkpoint names {fqn!r}, which this model does not have")
        mine = optimizer.state[params[fqn]]
        for key, value in loaded.items():
            if key not in mine:
                raise KeyError(f"optimizer checkpoint has {fqn}.{key}, which this optimizer does not keep")
            if mine[key] is not value:
                _local(mine[key]).copy_(_local(value))
    if len(state["param_groups"]) != len(optimizer.param_groups):
        raise ValueError("the optimizer checkpoint has a different number of param groups")
    for group, loaded in zip(optimizer.param_groups, state["param_groups"]):
        group.update({k: v for k, v in loaded.items() if k != "params"})


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


def offload_problems(fsdp_cfg, key: str = "fsdp_config") -> list[str]:
    """Offload combinations FSDP2 cannot run (checked at start-up and when an engine is built)."""
    if fsdp_cfg.gradient_offload and not fsdp_cfg.offload_policy:
        return [
            f"{key}.gradient_offload=True: in FSDP2 gradients live on the host only with {key}.offload_policy=True; "
            "set offload_policy=True or gradient_offload=False"
        ]
    return []


def build_offload(fsdp_cfg, device: torch.device, log: TransferLog, idle_on_host: bool = False) -> NoOffload:
    """The engine's offload mode from its fsdp_config (engine/checks.py says what the combination
    means once, on the driver, at start-up). `idle_on_host`: this engine's role shares its device
    with others that need it while this one idles (critic, reward model beside the actor and the
    rollout), so its params and optimizer state wait on the host between its phases whatever the
    config says -- only where the device is not the host."""
    problems = offload_problems(fsdp_cfg)
    if problems:
        raise ValueError(problems[0])
    if fsdp_cfg.offload_policy:
        return PolicyOffload(device, log, fsdp_cfg.reshard_after_forward)
    idle = idle_on_host and device.type != HOST.type
    params, optimizer = fsdp_cfg.param_offload or idle, fsdp_cfg.optimizer_offload or idle
    if params or optimizer:
        return ManualOffload(device, log, params, optimizer)
    return NoOffload(device, log)
