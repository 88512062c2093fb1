"""Log-probs and entropy without the full [tokens, vocab] float logits (verl's use_fused_kernels and
entropy_from_logits_with_chunking / entropy_checkpointing).

At a vocabulary like Qwen2.5's (151,936) the float32 logits of 4k tokens take 2.3 GiB, and the plain
path holds several tensors of that size at once (logits, log-softmax, softmax for the entropy, and in
backward their gradients). Three levers, from cheapest to most thorough:

- `entropy_from_logits_chunked`: the logits exist, but the entropy's temporaries (softmax, products)
  are made `chunk` tokens at a time.
- entropy checkpointing (`checkpointed`): the entropy keeps nothing for backward and is recomputed there.
- `linear_logprob_entropy` (fused): from the last hidden states and the head's weight, `chunk` tokens at
  a time: logits of the chunk, the taken token's log-prob, the entropy; nothing of size vocab is kept.
  Backward recomputes each chunk's logits and applies the closed-form gradients:
      z = h W^T / T,  p = softmax(z),  logp_y = z_y - lse(z),  H = lse(z) - sum_j p_j z_j
      d logp_y / d z = onehot(y) - p,   d H / d z = -p * (z - lse(z) + H)
      d h = (g_z W) / T,  d W = (g_z^T h) / T
  so the largest live tensor is chunk x vocab instead of tokens x vocab.

Every path gives the same values and gradients as log_softmax on the full logits (within float error).
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

DEFAULT_CHUNK = 2048


def entropy_from_logits_chunked(logits: torch.Tensor, chunk: int = DEFAULT_CHUNK) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim, `chunk` rows of the flattened tokens at a time."""
    flat = logits.reshape(-1, logits.shape[-1])
    parts = []
    for start in range(0, flat.shape[0], chunk):
        z = flat[start : start + chunk].float()
        p = torch.softmax(z, dim=-1)
        parts.append(torch.logsumexp(z, dim=-1) - (p * z).sum(-1))
    out = torch.cat(parts) if parts else flat.new_zeros(0, dtype=torch.float32)
    return out.reshape(logits.shape[:-1])


def checkpointed(fn, *args):
    """fn(*args) keeping nothing for backward but its inputs: recomputed when the gradient is needed."""
    if not torch.is_grad_enabled() or not any(a.requires_grad for a in args if torch.is_tensor(a)):
        return fn(*args)
    return checkpoint(fn, *args, use_reentrant=False)


def fused_chunk_tokens(vocab: int, budget_bytes: int = 256 * 1024**2) -> int:
    """Tokens per chunk so that one float32 chunk x vocab tensor stays near `budget_bytes`."""
    return max(16, budget_bytes // (4 * vocab))


def _log_softmax_chunk(h, weight, labels, temperature):
    """(log softmax(z) in place of z, logp of labels, lse) for one chunk; float32, one (c, V) tensor."""
    z = (h @ weight.t()).float().div_(temperature)  # (c, V)
    lse = torch.logsumexp(z, dim=-1)
    z.sub_(lse.unsqueeze(-1))
    return z, z.gather(-1, labels.unsqueeze(-1)).squeeze(-1), lse


class _LinearLogProbEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, labels, temperature, chunk, with_entropy):
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        entropy = torch.zeros(n, dtype=torch.float32, device=hidden.device)
        for s in range(0, n, chunk):
            logq, logp[s : s + chunk], _ = _log_softmax_chunk(
                hidden[s : s + chunk], weight, labels[s : s + chunk], temperature
            )
            if with_entropy:  # H = -sum_j p_j log p_j, as a batched dot product (no second (c, V) tensor)
                p = logq.exp()
                entropy[s : s + chunk] = -(p.unsqueeze(1) @ logq.unsqueeze(-1)).reshape(-1)
                del p
            del logq
        ctx.save_for_backward(hidden, weight, labels, entropy)
        ctx.temperature, ctx.chunk, ctx.with_entropy = temperature, chunk, with_entropy
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, labels, entropy = ctx.saved_tensors
        t, chunk = ctx.temperature, ctx.chunk
        grad_h = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        use_entropy = ctx.with_entropy and grad_entropy is not None
        for s in range(0, hidden.shape[0], chunk):
            h, y = hidden[s : s + chunk], labels[s : s + chunk]
            gl = grad_logp[s : s + chunk].unsqueeze(-1)
            logq, _, _ = _log_softmax_chunk(h, weight, y, t)
            g = logq.exp()  # p
            if use_entropy:  # d H / d z = -p (log p + H)
                logq.add_(entropy[s : s + chunk].unsqueeze(-1)).mul_(g)
                logq.mul_(grad_entropy[s : s + chunk].unsqueeze(-1))
            g.mul_(-gl)  # d logp_y / d z = onehot(y) - p
            g.scatter_add_(-1, y.unsqueeze(-1), gl)
            if use_entropy:
                g.sub_(logq)
            del logq
            g = g.div_(t)
            if grad_h is not None:
                grad_h[s : s + chunk] = g.to(weight.dtype) @ weight
            grad_w.addmm_(g.t(), h.float())  # accumulated in float32, in place (no (V, D) temporary)
            del g  # before the next chunk's logits exist
        return grad_h, grad_w.to(weight.dtype), None, None, None, None


def linear_logprob_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    chunk: int | None = None,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-prob of `labels`, entropy) of softmax(hidden @ weight^T / temperature), float32.

    hidden (..., D), weight (V, D) (the LM head's, no bias), labels (...). Entropy is zeros when
    `with_entropy` is False (and then costs nothing). `chunk` tokens at a time (default: a float32
    chunk x vocab tensor of ~256 MiB)."""
    shape = hidden.shape[:-1]
    chunk = chunk or fused_chunk_tokens(weight.shape[0])
    logp, entropy = _LinearLogProbEntropy.apply(
        hidden.reshape(-1, hidden.shape[-1]), weight, labels.reshape(-1), temperature, chunk, with_entropy
    )
    return logp.reshape(shape), entropy.reshape(shape)


@torch.no_grad()
def linear_sum_pi_squared(
    hidden: torch.Tensor, weight: torch.Tensor, temperature: float = 1.0, chunk: int | None = None
) -> torch.Tensor:
    """sum_v softmax(hidden @ weight^T / T)_v^2 per token, = exp(lse(2z) - 2 lse(z)), `chunk` tokens at
    a time (no gradient: it feeds optimal-token baselines from the old-log-prob pass)."""
    shape = hidden.shape[:-1]
    flat = hidden.reshape(-1, hidden.shape[-1])
    chunk = chunk or fused_chunk_tokens(weight.shape[0])
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=hidden.device)
    for s in range(0, flat.shape[0], chunk):
        z = (flat[s : s + chunk] @ weight.t()).float().div_(temperature)
        lse = torch.logsumexp(z, dim=-1)
        out[s : s + chunk] = torch.exp(torch.logsumexp(z.mul_(2), dim=-1) - 2 * lse)
        del z
    return out.reshape(shape)
