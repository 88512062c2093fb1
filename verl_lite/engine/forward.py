"""The one place a model forward happens: micro-batches on the device, padded or packed.

A `MicroBatch` is the device-side view of one planned micro-batch (micro_batch.py): its rows of
every batch tensor, cut to the columns the plan keeps. Tensors are read by layout:
(bs, S, ...) sequence-aligned ones (input_ids, attention_mask, position_ids) keep columns
[start, P + width), (bs, R, ...) response-aligned ones (responses, response_mask, advantages, ...)
keep their first `width` columns, anything else keeps its rows. Heads and loss functions index it
like a dict (`micro["responses"]`) and get device tensors.

How the model runs is chosen once, when the engine is built (`build_model_forward`):
  padded  the micro-batch as it is, with its attention mask;
  packed  use_remove_padding: the real tokens only (packing.py); the plan for that is made on the
          host, next to the micro-batch plan, so nothing is read back from the device.
Both return a `ForwardOutput` whose `logits` are laid out like the micro-batch's (rows, S', ...),
zeros on padding when packed. New ways to run the model (sequence parallelism, heads that want
hidden states instead of logits) are new strategies here; the loops in fsdp_engine.py do not change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from verl_lite.engine.micro_batch import MicroPlan
from verl_lite.engine.packing import PackPlan, packed_forward, plan_pack

Move = Callable[[torch.Tensor, torch.device], torch.Tensor]


@dataclass
class ForwardOutput:
    logits: torch.Tensor  # (rows, S', ...) in the micro-batch's padded layout


class MicroBatch:
    """One micro-batch's tensors on the device, its plan, and its rows' indices in the batch (on
    the device, for scattering results back)."""

    def __init__(
        self,
        tensors: dict[str, torch.Tensor],
        plan: MicroPlan,
        rows: torch.Tensor,
        pack: PackPlan | None = None,
    ):
        self.tensors, self.plan, self.rows, self.pack = tensors, plan, rows, pack

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.tensors[key]

    def __contains__(self, key: str) -> bool:
        return key in self.tensors

    def keys(self):
        return self.tensors.keys()

    @property
    def num_rows(self) -> int:
        return len(self.plan.rows)

    @property
    def width(self) -> int:
        """Response columns this micro-batch keeps."""
        return self.plan.width


def cut(tensors: dict[str, torch.Tensor], rows: torch.Tensor, plan: MicroPlan, seq: int, resp: int):
    """`plan`'s rows (`rows`: the plan's row index, on the tensors' device) and columns of each
    tensor; `seq` and `resp` are the batch's sequence and response widths."""
    stop = seq - resp + plan.width
    out = {}
    for key, value in tensors.items():
        value = value.index_select(0, rows)
        if value.dim() >= 2 and value.shape[1] == seq:
            value = value[:, plan.start : stop]
        elif value.dim() >= 2 and value.shape[1] == resp:
            value = value[:, : plan.width]
        out[key] = value
    return out


class PaddedForward:
    name = "padded"

    def plan(self, host: dict[str, torch.Tensor]) -> PackPlan | None:
        return None

    def __call__(self, module: torch.nn.Module, micro: MicroBatch) -> ForwardOutput:
        output = module(
            input_ids=micro["input_ids"],
            attention_mask=micro["attention_mask"],
            position_ids=micro["position_ids"],
            use_cache=False,
        )
        return ForwardOutput(output.logits)


class PackedForward(PaddedForward):
    name = "packed"

    def plan(self, host: dict[str, torch.Tensor]) -> PackPlan:
        """The packing, from the micro-batch's host attention_mask and position_ids."""
        return plan_pack(host["attention_mask"], host["position_ids"])

    def __call__(self, module: torch.nn.Module, micro: MicroBatch) -> ForwardOutput:
        return ForwardOutput(packed_forward(module, micro["input_ids"], micro.pack).logits)


def build_model_forward(use_remove_padding: bool) -> PaddedForward:
    return PackedForward() if use_remove_padding else PaddedForward()


def build_micro_batches(
    host: dict[str, torch.Tensor],
    device_tensors: dict[str, torch.Tensor],
    plans: list[MicroPlan],
    model_forward: PaddedForward,
    move: Move,
    device: torch.device,
) -> list[MicroBatch]:
    """Device micro-batches for `plans` over one batch (`host` and `device_tensors` hold the same
    tensors; the plans and packings are read from the host copy). All row indices travel at once."""
    seq = host["attention_mask"].shape[1]
    resp = response_width(host)
    sizes = [len(p.rows) for p in plans]
    rows = move(torch.cat([p.rows for p in plans]), device).split(sizes)
    seq_keys = {"attention_mask", "position_ids"}
    out = []
    for plan, index in zip(plans, rows):
        tensors = cut(device_tensors, index, plan, seq, resp)
        pack = model_forward.plan(cut({k: host[k] for k in seq_keys}, plan.rows, plan, seq, resp))
        out.append(MicroBatch(tensors, plan, index, None if pack is None else pack.to(device, move)))
    return out


def response_width(tensors: dict[str, torch.Tensor]) -> int:
    """R: the width of the batch's response part (from `responses` or `response_mask`)."""
    for key in ("responses", "response_mask"):
        if key in tensors:
            return tensors[key].shape[1]
    raise KeyError("a batch for the engine needs `responses` or `response_mask` (verl's layout)")
