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
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from verl_lite.algos.chunked_logprob import checkpointed, entropy_from_logits_chunked
from verl_lite.algos.logprob import entropy_from_logits, logprobs_from_logits, sum_pi_squared_from_logits
from verl_lite.engine.micro_batch import MicroPlan
from verl_lite.engine.packing import PackPlan, pack, plan_pack, unpack
from verl_lite.engine.token_head import token_request
from verl_lite.engine.ulysses import SeqShard, sequence_parallel, shard_rows

Move = Callable[[torch.Tensor, torch.device], torch.Tensor]


@dataclass(frozen=True)
class TokenRequest:
    """Per-response-token results a causal LM's forward must give, of softmax(logits / temperature):
    always `log_probs` of the sampled tokens, `entropy` and `sum_pi_squared` on request.
    `entropy_grad=False`: the entropy is only reported (an actor without an entropy bonus), so it is
    computed without an autograd graph (the fused head computes it with the log-probs either way)."""

    temperature: float = 1.0
    entropy: bool = False
    sum_pi_squared: bool = False
    entropy_grad: bool = True

    def names(self) -> tuple[str, ...]:
        return ("log_probs", "entropy", "sum_pi_squared")[: 3 if self.sum_pi_squared else 2]


@dataclass(frozen=True)
class TokenMath:
    """How a causal LM's per-token results are computed (verl's keys):
    fused                  model.use_fused_kernels: by the LM head from the hidden states, a chunk of
                           tokens at a time (engine/token_head.py), never the (tokens, vocab) logits
    entropy_chunk          actor.entropy_from_logits_with_chunking: the entropy's softmax temporaries
                           made this many tokens at a time (None: all at once)
    entropy_checkpointing  the entropy keeps nothing for backward; recomputed there"""

    fused: bool = False
    entropy_chunk: int | None = None
    entropy_checkpointing: bool = False


@dataclass
class ForwardOutput:
    logits: torch.Tensor | None  # (rows, S', ...) in the micro-batch's padded layout
    tokens: dict[str, torch.Tensor] = field(default_factory=dict)  # (rows, R') each, as requested


def _entropy(z: torch.Tensor, math: TokenMath) -> torch.Tensor:
    if math.entropy_chunk:
        fn = functools.partial(entropy_from_logits_chunked, chunk=math.entropy_chunk)
    else:
        fn = entropy_from_logits
    return checkpointed(fn, z) if math.entropy_checkpointing else fn(z)


def token_stats(
    logits: torch.Tensor, labels: torch.Tensor, request: TokenRequest, math: TokenMath = TokenMath()
) -> list[torch.Tensor]:
    """request.names() of softmax(logits / temperature) at each position; logits (..., vocab),
    labels (...). Entropy is zeros when not requested."""
    z = logits.float() / request.temperature
    out = [logprobs_from_logits(z, labels)]
    if not request.entropy:
        out.append(torch.zeros_like(out[0]))
    elif request.entropy_grad:
        out.append(_entropy(z, math))
    else:
        with torch.no_grad():
            out.append(_entropy(z.detach(), math))
    if request.sum_pi_squared:
        out.append(sum_pi_squared_from_logits(z))
    return out


def response_token_outputs(
    logits: torch.Tensor, micro, request: TokenRequest, math: TokenMath = TokenMath()
) -> dict[str, torch.Tensor]:
    """A TokenRequest's results from full logits: those of response token t sit at column
    P + t - 1, i.e. the last width + 1 columns but the last."""
    stats = token_stats(logits[:, -micro.width - 1 : -1], micro["responses"], request, math)
    out = dict(zip(request.names(), stats))
    if not request.entropy:
        out.pop("entropy")
    return out


def _response_columns(stats: torch.Tensor, micro, request: TokenRequest) -> dict[str, torch.Tensor]:
    """(rows, S', k) per-position results in the micro-batch's layout -> the request's (rows, R')."""
    out = dict(zip(request.names(), stats[:, -micro.width - 1 : -1].unbind(-1)))
    if not request.entropy:
        out.pop("entropy")
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
        self.shard: SeqShard | None = None  # this rank's slice under sequence parallelism
        self.epoch = self.mini_batch = 0  # where an update is (FSDPEngine.update sets them)
        self.num_in_mini_batch = 1  # this rank's micro-batches in that mini-batch (the same on every rank)

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


@dataclass
class ModelInputs:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    position_ids: torch.Tensor
    labels: torch.Tensor  # the next token of each position in the same layout (for the fused head)


class PaddedForward:
    """The micro-batch as it is, with its attention mask. Subclasses change the layout the model
    runs in (`model_inputs`) and how its per-position outputs come back (`restore`)."""

    name = "padded"

    def __init__(self, math: TokenMath = TokenMath()):
        self.math = math

    def plan(self, host: dict[str, torch.Tensor]) -> PackPlan | None:
        return None

    def context(self, micro: MicroBatch):
        return contextlib.nullcontext()

    def model_inputs(self, micro: MicroBatch) -> ModelInputs:
        ids = micro["input_ids"]
        return ModelInputs(ids, micro["attention_mask"], micro["position_ids"], ids.roll(-1, 1))

    def restore(self, values: torch.Tensor, micro: MicroBatch) -> torch.Tensor:
        """The model's (rows', L, ...) outputs -> the micro-batch's (rows, S', ...) layout."""
        return values

    def _run(self, module: torch.nn.Module, inputs: ModelInputs) -> torch.Tensor:
        return module(
            input_ids=inputs.input_ids,
            attention_mask=inputs.attention_mask,
            position_ids=inputs.position_ids,
            use_cache=False,
        ).logits

    def logits(self, module: torch.nn.Module, micro: MicroBatch) -> torch.Tensor:
        return self.restore(self._run(module, self.model_inputs(micro)), micro)

    def _fused(self, module: torch.nn.Module, micro: MicroBatch, request: TokenRequest) -> torch.Tensor:
        """(rows, S', k) per-position request.names() from the fused head (token_head.py)."""
        inputs = self.model_inputs(micro)
        head = module.get_output_embeddings()
        with token_request(head, inputs.labels, request.temperature, request.entropy, request.sum_pi_squared):
            return self.restore(self._run(module, inputs), micro)

    def __call__(
        self, module: torch.nn.Module, micro: MicroBatch, request: TokenRequest | None
    ) -> ForwardOutput:
        if request is not None and self.math.fused:
            return ForwardOutput(None, _response_columns(self._fused(module, micro, request), micro, request))
        logits = self.logits(module, micro)
        tokens = response_token_outputs(logits, micro, request, self.math) if request is not None else {}
        return ForwardOutput(logits, tokens)


class PackedForward(PaddedForward):
    """use_remove_padding: the real tokens only, packed into rows (packing.py)."""

    name = "packed"

    def plan(self, host: dict[str, torch.Tensor]) -> PackPlan:
        """The packing, from the micro-batch's host attention_mask and position_ids."""
        return plan_pack(host["attention_mask"], host["position_ids"])

    def model_inputs(self, micro: MicroBatch) -> ModelInputs:
        ids = pack(micro["input_ids"], micro.pack)
        # the next token in the packed row: a row's sequences are whole, so within a sequence it is
        # the sequence's next token (the last position's label is never read)
        return ModelInputs(ids, None, micro.pack.position_ids, ids.roll(-1, 1))

    def restore(self, values: torch.Tensor, micro: MicroBatch) -> torch.Tensor:
        return unpack(values, micro.pack)


class SequenceParallelForward(PackedForward):
    """Ulysses sequence parallelism (ulysses.py): the ranks of `group` receive the same micro-batch,
    pack it the same way, and each runs a 1/size slice of every packed row; attention exchanges
    heads for sequence. Per-token results (log-probs, entropy, values) are computed on the slice and
    gathered, never the (tokens, vocab) logits, unless a caller asks for logits without a request."""

    def __init__(self, math: TokenMath, group):
        super().__init__(math)
        self.group = group

    def shard(self, micro: MicroBatch) -> SeqShard:
        if micro.shard is None:
            micro.shard = shard_rows(micro.pack.position_ids, self.group)
        return micro.shard

    def context(self, micro: MicroBatch):
        return sequence_parallel(self.group, self.shard(micro).position_ids)

    def model_inputs(self, micro: MicroBatch) -> ModelInputs:
        full, shard = super().model_inputs(micro), self.shard(micro)
        return ModelInputs(
            shard.take(full.input_ids), None, shard.take(full.position_ids), shard.take(full.labels)
        )

    def restore(self, values: torch.Tensor, micro: MicroBatch) -> torch.Tensor:
        return super().restore(self.shard(micro).gather(values), micro)

    def __call__(
        self, module: torch.nn.Module, micro: MicroBatch, request: TokenRequest | None
    ) -> ForwardOutput:
        if request is None or self.math.fused:
            return super().__call__(module, micro, request)
        inputs = self.model_inputs(micro)
        stats = torch.stack(token_stats(self._run(module, inputs), inputs.labels, request, self.math), -1)
        return ForwardOutput(None, _response_columns(self.restore(stats, micro), micro, request))


def build_model_forward(
    use_remove_padding: bool, math: TokenMath = TokenMath(), sp_group=None
) -> PaddedForward:
    """The forward strategy of an engine: padded, packed, or packed and sequence-parallel over
    `sp_group` (which needs packing: config validation says so first)."""
    if sp_group is not None:
        if not use_remove_padding:
            raise ValueError("sequence parallelism needs model.use_remove_padding=True")
        return SequenceParallelForward(math, sp_group)
    return PackedForward(math) if use_remove_padding else PaddedForward(math)


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
