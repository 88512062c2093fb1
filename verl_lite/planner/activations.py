"""Activation memory of one engine on one rank: what a training micro-batch keeps for backward, and
the transient peak of a no-grad forward (log-probs, values, scores). Part of the memory model
(engine_memory.py composes these with the state and FSDP2 terms).

  activations   what autograd saves per token and layer (8h + 4kv + 4i elements in param_dtype plus
                two fp32 RMSNorm inputs), the logits (param_dtype) and four fp32 copies of the
                response logits (scaled logits, two log-softmaxes for log-probs and entropy, the
                softmax); with gradient checkpointing only each layer's input plus one layer's
                activations during its recompute
  forward       a no-grad forward: one layer's transient (3i + 4h per token), the logits and three
                fp32 copies of the response logits (lm head only)
  attention_mask  sdpa/eager with a mask (padded rows, or packed rows' block-causal mask): the boolean
                (rows, S, S) mask, shared by all layers, and the additive copy sdpa makes of it on every
                layer call and saves for backward (param_dtype; one layer's with checkpointing). None
                with flash attention (varlen: the boundaries only) or flex attention (a block mask of
                (rows, S/128, S/128) indices): `dense_mask` False, engine/attention.py's choice

The memory levers (issue 13) change these terms:
  sp_size       Ulysses sequence parallelism: a micro-batch of `micro` responses belongs to a group of
                sp ranks, each holding 1/sp of its tokens, so every per-token term above is per rank
                / sp (attention's exchanged q/k/v/output: the whole row for heads / sp, as many
                elements); with dynamic batching the group's token budget is sp x the per-GPU one
                (verl), so a rank holds the per-GPU budget. The attention mask still covers whole
                rows, made once as an additive mask shared by every layer (engine/ulysses.py). Not
                modelled: the repeated kv heads when kv_heads < sp (<= head_dim per token and layer).
  fused         use_fused_kernels: no logits and no fp32 copies of them; the head works `chunk`
                tokens at a time (algos/chunked_logprob.py): two fp32 chunk x vocab tensors in forward
                and backward, plus in backward the head's gradient accumulated in fp32 when
                param_dtype is narrower (its param_dtype copy is root_grads).
  entropy       of the four fp32 response-logit copies, two are the entropy's (its log-softmax and
                softmax); entropy_from_logits_with_chunking replaces them by one chunk of 2048 tokens
                (measured with the CPU allocator on the update's head: the peak falls by two copies).
                entropy_checkpointing keeps nothing after forward but recomputes at the start of
                backward, when every activation is still alive: the same peak (measured: unchanged),
                so it does not change the estimate.
  activation_offload  what a training forward saves goes to host memory layer by layer (engine/
                activation_offload.py): on the device the layer computing and the one copied or
                prefetched (2 layers' saved tensors, with checkpointing 2 layer inputs plus the
                recomputed layer), the rest (layers - 1 groups; the last stays) on the host, each
                pinned tensor rounded up to a power of two.

With LoRA each adapted linear adds its rank-wide intermediate per token; the frozen linear's input
is still saved, now for the adapter beside it.
"""

from __future__ import annotations

from verl_lite.engine.model_shape import ModelShape, ceil_div, dtype_bytes
from verl_lite.planner.engine_setup import EngineSetup
from verl_lite.planner.host import pow2_ceil

FUSED_CHUNK_BYTES = 256 * 1024**2  # algos/chunked_logprob.py: one fp32 chunk x vocab tensor
ENTROPY_CHUNK = 2048  # tokens per chunk of entropy_from_logits_with_chunking


def fused_chunk_tokens(vocab: int) -> int:
    """Tokens per chunk of the fused head (the same rule as algos/chunked_logprob.py)."""
    return max(16, FUSED_CHUNK_BYTES // (4 * vocab))


def micro_tokens(s: EngineSetup, training: bool = True) -> tuple[int, int, int]:
    """(tokens, response tokens, rows) one rank holds of a micro-batch: a training one, or a no-grad
    forward's. With sp ranks per micro-batch each holds 1/sp of the tokens; a token budget (dynamic
    batching) is per rank (the group's is sp times it, as in verl)."""
    budget = s.tokens_per_micro if training else s.forward_tokens
    micro = s.micro if training else s.forward_micro
    if budget:
        rows = ceil_div(budget * s.sp_size, s.seq_len)
        return budget, budget * s.response_len // s.seq_len, rows
    return ceil_div(micro * s.seq_len, s.sp_size), ceil_div(micro * s.response_len, s.sp_size), micro


def _layer_tensors(shape: ModelShape, s: EngineSetup, tokens: int) -> list[int]:
    """Bytes of each tensor one decoder layer saves for backward (without checkpointing)."""
    c = dtype_bytes(s.param_dtype)
    h, kv, i = shape.hidden, shape.kv_dim, shape.intermediate
    lora = [tokens * s.lora_rank * len(s.lora_targets) * c] if s.lora_rank else []  # adapters' inner
    return [tokens * h * c] * 8 + [tokens * kv * c] * 4 + [tokens * i * c] * 4 + [tokens * h * 4] * 2 + lora


def mask_terms(shape: ModelShape, s: EngineSetup, rows: int) -> tuple[int, int]:
    """(shared, per layer) bytes of the attention mask of `rows` rows of seq_len: sdpa's additive copy
    per layer, or with sequence parallelism one additive mask shared by all layers."""
    square = rows * s.seq_len * s.seq_len
    if not s.dense_mask:
        return 0, 0
    if s.sp_size > 1:
        return square * dtype_bytes(s.param_dtype), 0
    return square, square * dtype_bytes(s.param_dtype)


def head_terms(shape: ModelShape, s: EngineSetup, tokens: int, response_tokens: int, training: bool) -> int:
    """The head's output and what the log-prob/entropy math keeps of it (see the module docstring)."""
    c, v = dtype_bytes(s.param_dtype), shape.vocab
    if shape.head != "lm":
        return tokens * shape.out_features * c
    if s.fused:
        chunk = min(fused_chunk_tokens(v), tokens)
        widen = v * shape.hidden * 4 if training and c != 4 else 0
        return 2 * chunk * v * 4 + widen
    copy = response_tokens * v * 4
    chunk = min(ENTROPY_CHUNK, response_tokens) * v * 4
    if training:  # scaled logits and the log-probs' log-softmax, then the entropy's two
        entropy = chunk if s.entropy_chunking else 2 * copy
        return tokens * v * c + 2 * copy + entropy
    return tokens * v * c + 2 * copy + (chunk if s.entropy_chunking else copy)


def activation_terms(shape: ModelShape, s: EngineSetup) -> dict[str, int]:
    """What one training micro-batch's forward keeps for backward at its peak (`activations`), and
    with activation offload what waits on the host (`host_activations`)."""
    c = dtype_bytes(s.param_dtype)
    tokens, response_tokens, rows = micro_tokens(s)
    shared, mask = mask_terms(shape, s, rows)
    layer = sum(_layer_tensors(shape, s, tokens)) + mask
    saved = [tokens * shape.hidden * c] if s.grad_checkpointing else [*_layer_tensors(shape, s, tokens), mask]
    on_device = min(shape.layers, 2) if s.activation_offload else shape.layers
    layers = on_device * sum(saved) + (layer if s.grad_checkpointing else 0)
    host = 0
    if s.activation_offload:
        rounded = [pow2_ceil(b) if s.pinned_host else b for b in saved if b]
        host = (shape.layers - 1) * sum(rounded)
    head = head_terms(shape, s, tokens, response_tokens, training=True)
    return {"activations": layers + shared + head + tokens * shape.hidden * c, "host_activations": host}


def forward_bytes(shape: ModelShape, s: EngineSetup) -> int:
    """The transient peak of one no-grad forward micro-batch."""
    c = dtype_bytes(s.param_dtype)
    tokens, response_tokens, rows = micro_tokens(s, training=False)
    shared, mask = mask_terms(shape, s, rows)
    layer = tokens * (3 * shape.intermediate + 4 * shape.hidden) * c + shared + mask
    return layer + head_terms(shape, s, tokens, response_tokens, training=False)
