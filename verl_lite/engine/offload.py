"""Offload modes: where an engine's sharded params, grads and optimizer state live, and when they move.

  none    everything stays on the device.
  manual  `param_offload` / `optimizer_offload`: sharded params are copied to host memory when a
          phase ends and back when the next begins. Optimizer state lives on the host and the step
          is streamed: one FSDP unit (a decoder layer, then the root's params) at a time brings its
          moments to the device, steps, and sends them back. Every copy is timed and its bytes
          counted, per phase.
  policy  `offload_policy`: FSDP2's CPUOffloadPolicy. Sharded params, grads and optimizer state live
          on the host; FSDP2 copies a layer's shard to the device for each unshard, copies each
          reduced grad shard back, and the optimizer steps on the host. These copies happen inside
          FSDP2, so they are counted from its copy schedule (a shard per unshard, a grad shard per
          reduce-scatter), not timed.

The mode is chosen once, when the engine is built (`build_offload`); the engine calls the same
hooks whatever the mode, so no flag is tested anywhere else.

Manual offload overlaps its copies with compute (on a GPU; on CPU copies are synchronous). Copies to
the device run on one side stream, copies to the host on another, and the compute stream waits on
device events, never the host on the device:
  - optimizer step (`step_schedule`): unit i+1's moments are copied in while unit i steps, and unit
    i's go back out while unit i+1 steps; at most three units' moments are on the device (the one
    leaving, the one stepping, the one arriving), which the memory model counts.
  - params, in a phase that starts with a forward (the engine's forward and update verbs): every
    unit's shard is copied in, in forward order, at the phase's start, and each unit's forward waits
    only for its own shard and the next one's (FSDP2 may all-gather the next unit early), so layer 0
    computes while the later layers arrive. Other phases (weight gather, checkpoints) wait for all
    of them before anything reads a param. Leaving a phase, the copies out wait for the phase's last
    kernel and the storage is freed once they are done (stream-ordered: `mark_used_on`).

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

import torch
from torch import nn
from torch.distributed.fsdp import OffloadPolicy
from torch.distributed.tensor import DTensor

from verl_lite.engine.optim import zero_adamw_state
from verl_lite.engine.transfers import Transfer, TransferLog, offload_metrics
from verl_lite.utils import device as dev

__all__ = ["Transfer", "TransferLog", "offload_metrics"]  # the accounting, engine/transfers.py
HOST = torch.device("cpu")


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
    """`local` in `t`'s place, where it is: wrapped as a DTensor with t's sharding when t is one.
    Not `DTensor.from_local`, which copies a host tensor to the mesh's device (on a GPU the moments
    meant for their host home came straight back: the H200 check found them on the device)."""
    if isinstance(t, DTensor):
        return DTensor(local, t._spec, requires_grad=False)  # as FSDP2 wraps its host shards
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

    def enter_phase(self, phase: str, streamed: bool = False) -> None:
        """`streamed`: the phase's first use of the params is a forward (units may arrive one by one)."""

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
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict  # DCP: only on resume

        set_optimizer_state_dict(self.module, self.optimizer, state)

    def pinned_bytes(self) -> int:
        """Host bytes this mode holds page-locked (HostBuffers; 0 without CUDA)."""
        return 0


def step_schedule(num_units: int) -> list[tuple[str, int]]:
    """The streamed optimizer step's order of operations over `num_units` units: ("in", i) queues
    unit i's moments to the device, ("step", i) steps it once they are there, ("out", i) queues them
    back once it has stepped. The next unit's copy in is queued before a unit steps, so copies in,
    steps and copies out of neighbouring units overlap; at most three units are on the device."""
    ops = [("in", 0)] if num_units else []
    for i in range(num_units):
        if i + 1 < num_units:
            ops.append(("in", i + 1))
        ops += [("step", i), ("out", i)]
    return ops


class ManualOffload(NoOffload):
    """param_offload / optimizer_offload: copies at phase boundaries and around the step, overlapped
    with compute on side streams (module docstring).

    Host copies live in `HostBuffer`s (utils/device.py): exactly their bytes, page-locked once, and
    reused by every move. Params stay the same objects throughout: leaving a phase copies each
    sharded param's storage to its host slot and frees the device storage (resize to 0, as FSDP2
    itself frees unsharded params); entering one re-allocates it and copies back. FSDP2 and the
    optimizer never see a new tensor. Optimizer state tensors are re-bound instead: they live as
    host tensors (views of their unit's HostBuffer) and get device copies only around the step.
    `trace` (a list, or None) records the copies and steps in the order they are queued.
    """

    name = "manual"

    def __init__(self, device: torch.device, log: TransferLog, params: bool, optimizer: bool):
        super().__init__(device, log)
        self.params, self.optim = params, optimizer
        self.optim_homes: dict[int, dev.HostBuffer] = {}
        self.to_device, self.to_host = dev.new_stream(), dev.new_stream()
        self.arrivals: dict[int, object] = {}  # unit -> event: its param shard is on the device
        self.forward_seen = False  # FSDP2's lazy init (first forward) reads every param: wait for all
        self.trace: list | None = None

    def attach(self, module: nn.Module, optimizer, units: list[nn.Module]) -> None:
        super().attach(module, optimizer, units)
        seen: set[int] = set()
        self.param_chunks, owned = [], []
        for unit in [*units, module]:  # the root last: what no layer claimed
            mine = [p for p in unit.parameters() if id(p) not in seen]
            seen.update(id(p) for p in mine)
            owned.append(mine)
            chunk = [p for p in mine if p.requires_grad]  # what the optimizer steps (not LoRA's base)
            if chunk:
                self.param_chunks.append(chunk)
        self.storages, index = [], {}
        self.unit_storages: list[list[int]] = []  # per unit in forward order: the root's first
        for mine in [owned[-1], *owned[:-1]]:
            slots = []
            for p in mine:
                storage = _local(p).untyped_storage()
                if storage.nbytes() and storage.data_ptr() not in index:
                    index[storage.data_ptr()] = len(self.storages)
                    self.storages.append(storage)
                    slots.append(index[storage.data_ptr()])
            self.unit_storages.append(slots)
        if self.params:  # params live on the host between phases, starting now
            self.param_home = dev.HostBuffer([s.nbytes() for s in self.storages])
            self._params_out("init")
            for i, unit in enumerate([module, *units]):  # before FSDP2's own pre-forward hook
                unit.register_forward_pre_hook(lambda *_, i=i: self._await_unit(i), prepend=True)

    def pinned_bytes(self) -> int:
        homes = [*self.optim_homes.values(), *([self.param_home] if self.params else [])]
        return sum(h.nbytes for h in homes if h.pinned)

    def _copy(self, phase: str, to_device: bool, nbytes: int, what: tuple, fn) -> object:
        """Queue `fn`'s copies on the direction's stream, timed; returns the event marking their end
        (None without CUDA, where the copies are synchronous and timed on the host clock)."""
        stream = self.to_device if to_device else self.to_host
        if self.trace is not None:
            self.trace.append(what)
        start, clock = dev.timing_event(stream), time.perf_counter()
        with dev.on_stream(stream):
            fn()
        stop = dev.timing_event(stream)
        if stop is None:
            self.log.add(phase, to_device, nbytes, time.perf_counter() - clock)
        else:
            self.log.add_events(phase, to_device, nbytes, start, stop)
        return stop

    # --- params: in at a phase's start, out at its end ------------------------------------------------
    # the direction is explicit: on a CPU-only machine device and host are the same torch.device
    def _params_in(self, phase: str, streamed: bool) -> None:
        home = self.param_home
        dev.stream_wait(self.to_device, self.to_host)  # the last exit's copies into the homes are done
        for unit, slots in enumerate(self.unit_storages):

            def move(slots=slots):
                for i in slots:
                    self.storages[i].resize_(home.sizes[i])  # allocated on the copy stream ...
                    _as_bytes(self.storages[i]).copy_(home.slot(i), non_blocking=True)

            nbytes = sum(home.sizes[i] for i in slots)
            self.arrivals[unit] = self._copy(phase, True, nbytes, ("params_in", unit), move)
            for i in slots:  # ... and used on the compute stream
                dev.mark_used_on(_as_bytes(self.storages[i]), None)
        if not (streamed and self.forward_seen):
            self._await_all()

    def _await_unit(self, unit: int) -> None:
        """Before a unit's forward (and FSDP2's all-gather of it): its shard and the next one's are in."""
        for u in (unit, unit + 1):
            event = self.arrivals.pop(u, None)
            if event is not None:
                dev.wait_event(None, event)
        self.forward_seen = True

    def _await_all(self) -> None:
        dev.stream_wait(None, self.to_device)
        self.arrivals.clear()

    def _params_out(self, phase: str) -> None:
        home = self.param_home
        self._await_all()  # a phase that ran no forward has not waited for its params yet
        dev.stream_wait(self.to_host, None)  # the phase's last writes (the optimizer step) are done

        def move():
            for i, storage in enumerate(self.storages):
                home.slot(i).copy_(_as_bytes(storage), non_blocking=True)
                dev.mark_used_on(_as_bytes(storage), self.to_host)
                storage.resize_(0)  # stream-ordered free: reused once the copy above is done

        self._copy(phase, False, sum(home.sizes), ("params_out",), move)

    def enter_phase(self, phase: str, streamed: bool = False) -> None:
        if self.params:
            self._params_in(phase, streamed)

    def exit_phase(self, phase: str) -> None:
        if self.params:
            self._params_out(phase)

    # --- optimizer state: streamed through the device around the step --------------------------------
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

    def _state_in(self, index: int, phase: str) -> object:
        """Queue unit `index`'s moments to the device (a copy even where the device is the host: the
        step writes into it); None when it has none yet (the first step creates them)."""
        entries = self._state_entries(self.param_chunks[index])
        if not entries:
            return None
        home = self._home(index, entries)
        compute = dev.current_stream()  # (inside `move` the copy stream is the current one)

        def move():
            for s, k in entries:
                copy = _local(s[k]).to(self.device, copy=True, non_blocking=True)
                dev.mark_used_on(copy, compute)  # the step reads and writes it on the compute stream
                s[k] = _like(s[k], copy)

        return self._copy(phase, True, sum(home.sizes), ("state_in", index), move)

    def _state_out(self, index: int, phase: str) -> None:
        """Queue unit `index`'s stepped moments back into its host home."""
        entries = self._state_entries(self.param_chunks[index])
        home = self._home(index, entries)
        dev.stream_wait(self.to_host, None)  # after the unit's step

        def move():
            for j, (s, k) in enumerate(entries):
                local = _local(s[k])
                host = home.view(j, local.shape, local.dtype)
                host.copy_(local, non_blocking=True)
                dev.mark_used_on(local, self.to_host)  # freed once the copy is done
                s[k] = _like(s[k], host)

        self._copy(phase, False, sum(home.sizes), ("state_out", index), move)

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
        dev.stream_wait(self.to_device, self.to_host)  # the last step's copies into the homes are done
        arrived: dict[int, object] = {}
        for op, index in step_schedule(len(self.param_chunks)):
            if op == "in":
                arrived[index] = self._state_in(index, phase)
            elif op == "out":
                self._state_out(index, phase)
            else:
                dev.wait_event(None, arrived.pop(index))  # this unit's moments are on the device
                self._step_chunk(index, grads)
        # the last copies out overlap what follows; the host reads the homes only after the phase's
        # end has waited for the device (FSDPEngine.phase)
        for p, g in grads.items():
            p.grad = g

    def _step_chunk(self, index: int, grads: dict) -> None:
        if self.trace is not None:
            self.trace.append(("step", index))
        for p in grads:
            p.grad = None
        for p in self.param_chunks[index]:
            p.grad = grads[p]
        self.optimizer.step()  # the first step creates the state, on the params' device


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

    def enter_phase(self, phase: str, streamed: bool = False) -> None:
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


def build_offload(fsdp_cfg, device: torch.device, log: TransferLog) -> NoOffload:
    """The engine's offload mode from its fsdp_config (engine/checks.py says what the combination
    means once, on the driver, at start-up; a critic or reward model idle beside the actor on a GPU
    has param_offload and optimizer_offload set there: planner/auto_offload.resolve_idle_on_host)."""
    problems = offload_problems(fsdp_cfg)
    if problems:
        raise ValueError(problems[0])
    if fsdp_cfg.offload_policy:
        return PolicyOffload(device, log, fsdp_cfg.reshard_after_forward)
    if fsdp_cfg.param_offload or fsdp_cfg.optimizer_offload:
        return ManualOffload(device, log, fsdp_cfg.param_offload, fsdp_cfg.optimizer_offload)
    return NoOffload(device, log)
