"""Activation offload (`model.enable_activation_offload`): what a training forward saves for backward
waits in host memory, layer by layer, and comes back when backward reaches that layer.

Without gradient checkpointing, a decoder layer saves its intermediate tensors (norm inputs, q/k/v,
attention and MLP activations) through autograd's saved-tensor hooks; with it (non-reentrant, as the
engine enables it), a layer keeps only its input, which torch's checkpoint also saves through those
hooks, and recomputes the rest in backward. Either way the saved bytes grow with the number of layers.
Every tensor saved from the start of layer i's forward to the start of layer i+1's is group i: it is
copied to host memory and the device copy is released when layer i+1 starts. In backward, the first
tensor of group i that is needed brings the whole group back, and group i-1's copy starts at once, so
it overlaps layer i's backward. The last group and what follows it (final norm, head) stay on the
device: backward needs them first, so moving them out and straight back would only cost. Parameters
are never copied (their storage belongs to FSDP2), nor are tensors under `min_bytes`.

On a GPU the copies run on two side streams (device to host, host to device) into pinned host memory
and the compute stream only waits where it uses a tensor; each copy is timed with device events. On a
CPU-only machine host and device are the same memory: the copies are still real (new storage, synchronous
and timed), so the bookkeeping and exactness are tested, but nothing is saved. Restored tensors are
bit-identical to the saved ones, so gradients are exactly those without offload. Every copy is counted in
the engine's TransferLog under the phase `<phase>/activations`.
"""

from __future__ import annotations

import itertools
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import torch
from torch import nn

from verl_lite.engine.offload import HOST
from verl_lite.engine.transfers import TransferLog
from verl_lite.utils import device as dev


@dataclass
class _Saved:
    group: int
    host: torch.Tensor
    users: int = 1
    restored: torch.Tensor | None = None


@dataclass
class _Group:
    handles: list[int] = field(default_factory=list)
    keep: list[torch.Tensor] = field(default_factory=list)  # originals, until the layer is done
    keys: dict[tuple, int] = field(default_factory=dict)  # same tensor saved twice -> one copy
    loaded: bool = False


def _dense_alone(t: torch.Tensor) -> bool:
    """`t` covers its whole storage, so a copy can keep its strides."""
    return t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.numel() * t.element_size()


class ActivationOffload:
    """Built once per engine (`apply` to its decoder layers); `training_forward` around each training
    forward, `flush` after each backward."""

    def __init__(self, device: torch.device, log: TransferLog, min_bytes: int = 1024):
        self.device, self.log, self.min_bytes = device, log, min_bytes
        self.pin = dev.can_pin_memory()
        self.d2h, self.h2d = dev.new_stream(), dev.new_stream()
        self.num_layers = 0
        self.active = False
        self.phase = "update"
        self._ids = itertools.count()
        self._reset()

    def _reset(self) -> None:
        self.group = -1  # the decoder layer whose forward started last
        self.groups: dict[int, _Group] = {}
        self.saved: dict[int, _Saved] = {}
        self.skip: set[int] = set()
        self.pending_timings: list[tuple[bool, int, object, object]] = []

    # --- wiring -------------------------------------------------------------------------------------
    def apply(self, layers: list[nn.Module]) -> None:
        """Mark the decoder layers' boundaries: what is saved from one layer's start to the next's is a group."""
        self.num_layers = len(layers)
        for index, layer in enumerate(layers):
            layer.register_forward_pre_hook(partial(self._enter_layer, index))

    @contextmanager
    def training_forward(self, phase: str):
        """Saved tensors of this forward go to the host (nothing happens without grad mode)."""
        if not torch.is_grad_enabled():
            yield
            return
        self._reset()
        self.phase, self.active = phase, True
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                yield
        finally:
            self._close_group()
            self.active = False

    def flush(self) -> None:
        """After backward: hand the device-timed copies to the TransferLog, which reads their seconds
        when the step's metrics are taken, with one wait for all (none here: the host runs on to the
        next micro-batch). A no-op on CPU, where copies are timed inline."""
        for to_device, nbytes, start, stop in self.pending_timings:
            self.log.add_events(f"{self.phase}/activations", to_device, nbytes, start, stop)
        self.pending_timings = []

    # --- forward ------------------------------------------------------------------------------------
    def _enter_layer(self, index: int, module: nn.Module, args) -> None:
        if not self.active:
            return
        self._close_group()
        self.group = index
        # FSDP2's pre-forward hook ran first: these are the unsharded parameters this layer computes with
        self.skip = {p.untyped_storage().data_ptr() for p in module.parameters()}

    def _close_group(self) -> None:
        """The layer is done: its originals may be freed (device copies were queued before)."""
        group = self.groups.get(self.group)
        if group is not None:
            group.keep, group.keys = [], {}

    def _offloads(self, group: int) -> bool:
        return 0 <= group < self.num_layers - 1

    def _pack(self, t: torch.Tensor):
        if (
            not self._offloads(self.group)
            or t.layout != torch.strided
            or t.numel() * t.element_size() < self.min_bytes
            or t.untyped_storage().data_ptr() in self.skip
        ):
            return t
        return self._store(self.group, t)

    def _store(self, group_id: int, t: torch.Tensor) -> int:
        group = self.groups.setdefault(group_id, _Group())
        key = (t.data_ptr(), t.dtype, tuple(t.shape), t.stride())
        if key in group.keys:
            handle = group.keys[key]
            self.saved[handle].users += 1
            return handle
        handle = next(self._ids)
        self.saved[handle] = _Saved(group_id, self._copy(t, HOST, self.d2h, False))
        group.handles.append(handle)
        group.keep.append(t)
        group.keys[key] = handle
        return handle

    def _copy(self, t: torch.Tensor, target: torch.device, stream, to_device: bool) -> torch.Tensor:
        """A copy of `t` on `target` in new storage (same strides where `t` is dense), queued on `stream`."""
        pin = self.pin and target.type == "cpu"
        if not to_device:  # the tensor is complete once the compute queued so far is
            dev.stream_wait(stream, None)
        start, clock = dev.timing_event(stream), time.perf_counter()
        with dev.on_stream(stream):
            stride = t.stride() if _dense_alone(t) else None
            out = dev.empty(t.shape, t.dtype, target, stride=stride, pinned=pin)
            out.copy_(t, non_blocking=pin or (self.pin and to_device))
        dev.mark_used_on(t, stream)
        nbytes = t.numel() * t.element_size()
        if start is None:
            self.log.add(f"{self.phase}/activations", to_device, nbytes, time.perf_counter() - clock)
        else:
            self.pending_timings.append((to_device, nbytes, start, dev.timing_event(stream)))
        return out

    # --- backward -----------------------------------------------------------------------------------
    def _unpack(self, handle):
        if isinstance(handle, torch.Tensor):
            return handle
        saved = self.saved[handle]
        self._load(saved.group)
        self._load(saved.group - 1)  # prefetch: backward needs the previous layer next
        dev.stream_wait(None, self.h2d)
        out = saved.restored
        dev.mark_used_on(out, None)
        saved.users -= 1
        if saved.users == 0:
            del self.saved[handle]
        return out

    def _load(self, group_id: int) -> None:
        group = self.groups.get(group_id)
        if group is None or group.loaded:
            return
        group.loaded = True
        dev.stream_wait(self.h2d, self.d2h)  # the host copies are complete before they are read
        for handle in group.handles:
            saved = self.saved.get(handle)
            if saved is not None:
                saved.restored = self._copy(saved.host, self.device, self.h2d, True)
                saved.host = None
