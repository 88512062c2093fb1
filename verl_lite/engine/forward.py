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
Both return a `ForwardOutput`:
  tokens  what a causal LM's caller asked for per response token (`TokenRequest`): the sampled
          token's log-prob and, on request, the entropy and sum_v pi_v^2, all (rows, R') of
          softmax(logits / temperature). Actor heads and losses read only these, so a strategy that
          never forms the (tokens, vocab) logits (fused chunked log-probs from hidden states,
          sequence parallelism gathering per-token results) is a swap here, not in the workers.
  logits  the model's output laid out like the micro-batch, (rows, S', ...), zeros on padding
          when packed: what the scalar heads of value and reward models read.
A strategy's `context(micro)` wraps a micro-batch's forward and, in training, its backward (what
sequence parallelism needs when gradient checkpointing recomputes attention in backward).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from verl_lite.algos.logprob import entropy_from_logits, logprobs_from_logits, sum_pi_squared_from_logits
from verl_lite.engine.micro_batch import MicroPlan
from verl_lite.engine.packing import PackPlan, packed_forward, plan_pack

Move = Callable[[torch.Tensor, torch.device], torch.Tensor]


@dataclass(frozen=True)
class TokenRequest:
    """Per-response-token results a causal LM's forward must give, of softmax(logits / temperature):
    always `log_probs` of the sampled tokens, `entropy` and `sum_pi_squared` on request."""

    temperature: float = 1.0
    entropy: bool = False
    sum_pi_squared: bool = False


@dataclass
class ForwardOutput:
    logits: torch.Tensor | None  # (rows, S', ...) in the micro-batch's padded layout
    tokens: dict[str, torch.Tensor] = field(default_factory=dict)  # (rows, R') each, as requested


def response_token_outputs(logits: torch.Tensor, micro, request: TokenRequest) -> dict[str, torch.Tensor]:
    """A TokenRequest's results from full logits: those of response token t sit at column
    P + t - 1, i.e. the last width + 1 columns but the last."""
    z = logits[:, -micro.width - 1 : -1].float() / request.temperature  # (rows, R', vocab)
    out = {"log_probs": logprobs_from_logits(z, micro["responses"])}
    if request.entropy:
        out["entropy"] = entropy_from_logits(z)
    if request.sum_pi_squared:
        out["sum_pi_squared"] = sum_pi_squared_from_logits(z)
    return out


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

    def context(self, micro: MicroBatch):
        return contextlib.nullcontext()

    def logits(self, module: torch.nn.Module, micro: MicroBatch) -> torch.Tensor:
        return module(
            input_ids=micro["input_ids"],
            attention_mask=micro["attention_mask"],
            position_ids=micro["position_ids"],
            use_cache=False,
        ).logits

    def __call__(
        self, module: torch.nn.Module, micro: MicroBatch, request: TokenRequest | None
    ) -> ForwardOutput:
        logits = self.logits(module, micro)
        tokens = response_token_outputs(logits, micro, request) if request is not None else {}
        return ForwardOutput(logits, tokens)


class PackedForward(PaddedForward):
    name = "packed"

    def plan(self, host: dict[str, torch.Tensor]) -> PackPlan:
        """The packing, from the micro-batch's host attention_mask and position_ids."""
        return plan_pack(host["attention_mask"], host["position_ids"])

    def logits(self, module: torch.nn.Module, micro: MicroBatch) -> torch.Tensor:
        return packed_forward(module, micro["input_ids"], micro.pack).logits


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
