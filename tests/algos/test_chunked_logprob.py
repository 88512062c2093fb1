"""Chunked log-probs and entropy against the plain full-logits path, and numbers worked by hand."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from tests.helpers.logits import logprob_entropy_from_logits
from verl_lite.algos.chunked_logprob import (
    entropy_from_logits_chunked,
    fused_chunk_tokens,
    linear_logprob_entropy,
    linear_sum_pi_squared,
)
from verl_lite.algos.logprob import entropy_from_logits, logprobs_from_logits

TOL = 1e-5
N, D, V, T = 37, 16, 101, 0.7


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, D, generator=g, requires_grad=True)
    weight = (torch.randn(V, D, generator=g) * 0.5).requires_grad_()
    labels = torch.randint(0, V, (N,), generator=g)
    a, b = torch.randn(N, generator=g), torch.randn(N, generator=g)
    return hidden, weight, labels, a, b


def _plain(hidden, weight, labels):
    logits = hidden @ weight.t() / T
    return logprobs_from_logits(logits, labels), entropy_from_logits(logits)


def _grads(fn, with_entropy=True):
    hidden, weight, labels, a, b = _inputs()
    logp, ent = fn(hidden, weight, labels)
    loss = (a * logp).sum() + ((b * ent).sum() if with_entropy else 0.0)
    loss.backward()
    return logp.detach(), ent.detach(), hidden.grad, weight.grad


def _close(x, y):
    return (x - y).abs().max().item() < TOL


@pytest.mark.parametrize("chunk", [1, 8, 37, 64])
def test_fused_matches_full_logits_values_and_gradients(chunk):
    ref = _grads(_plain)
    fused = _grads(lambda h, w, y: linear_logprob_entropy(h, w, y, temperature=T, chunk=chunk))
    for name, x, y in zip(("logp", "entropy", "d hidden", "d weight"), fused, ref, strict=True):
        assert _close(x, y), f"{name} differs (chunk {chunk})"
    assert ref[3].abs().max() > 1e-2, "non-trivial gradients"


def test_fused_without_entropy_gives_log_prob_gradients_only():
    ref = _grads(_plain, with_entropy=False)
    fused = _grads(
        lambda h, w, y: linear_logprob_entropy(h, w, y, temperature=T, chunk=8, with_entropy=False),
        with_entropy=False,
    )
    assert _close(fused[0], ref[0]) and _close(fused[2], ref[2]) and _close(fused[3], ref[3])
    assert fused[1].abs().max() == 0


def test_fused_keeps_batch_shape():
    hidden, weight, labels, _, _ = _inputs()
    logp, ent = linear_logprob_entropy(hidden.reshape(1, N, D), weight, labels.reshape(1, N), T, chunk=5)
    assert logp.shape == ent.shape == (1, N)


def test_hand_computed_two_token_vocabulary():
    # logits [0, ln 3] -> p = [1/4, 3/4]; label 1 -> ln(3/4); entropy -(1/4 ln 1/4 + 3/4 ln 3/4)
    hidden = torch.tensor([[1.0]])
    weight = torch.tensor([[0.0], [math.log(3.0)]])
    logp, ent = linear_logprob_entropy(hidden, weight, torch.tensor([1]), temperature=1.0, chunk=1)
    assert abs(logp.item() - math.log(0.75)) < 1e-6
    assert abs(ent.item() + 0.25 * math.log(0.25) + 0.75 * math.log(0.75)) < 1e-6


@pytest.mark.parametrize("chunk,checkpointing", [(None, True), (8, False), (8, True)])
def test_logits_path_chunking_and_checkpointing_match_plain(chunk, checkpointing):
    g = torch.Generator().manual_seed(1)
    base = torch.randn(3, 11, V, generator=g)
    labels = torch.randint(0, V, (3, 11), generator=g)
    weights = torch.randn(3, 11, generator=g)

    def run(**kw):
        logits = base.clone().requires_grad_()
        logp, ent = logprob_entropy_from_logits(logits, labels, **kw)
        ((logp + 0.3 * ent) * weights).sum().backward()
        return logp.detach(), ent.detach(), logits.grad

    ref = run()
    got = run(entropy_chunk=chunk, entropy_checkpointing=checkpointing)
    assert all(_close(x, y) for x, y in zip(got, ref, strict=True))
    assert _close(ref[0], logprobs_from_logits(base, labels))
    assert _close(entropy_from_logits_chunked(base, 4), entropy_from_logits(base))


class _LargestTensor(TorchDispatchMode):
    """Records the largest tensor any op creates."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_largest_tensor_is_one_chunk_of_logits_not_all_of_them():
    hidden, weight, labels, a, b = _inputs()
    assert 32 * V > weight.numel(), "a chunk of logits must outsize the weight's gradient for this check"
    for fn, bound in (
        (lambda: linear_logprob_entropy(hidden, weight, labels, temperature=T, chunk=32), 32 * V),
        (lambda: _plain(hidden, weight, labels), N * V),
    ):
        with _LargestTensor() as mode:
            logp, ent = fn()
            ((a * logp).sum() + (b * ent).sum()).backward()
        assert mode.largest == bound, f"largest tensor {mode.largest}, expected {bound}"


def test_default_chunk_keeps_a_float_chunk_near_256_mib():
    chunk = fused_chunk_tokens(151_936)
    assert chunk * 151_936 * 4 <= 256 * 1024**2 < (chunk + 1) * 151_936 * 4
    assert fused_chunk_tokens(10**9) == 16


def test_log_softmax_reference_is_what_the_plain_path_computes():
    hidden, weight, labels, _, _ = _inputs()
    logits = hidden @ weight.t() / T
    expected = F.log_softmax(logits, -1).gather(-1, labels[:, None]).squeeze(-1)
    assert _close(_plain(hidden, weight, labels)[0], expected)


def test_sum_pi_squared_in_chunks_matches_the_softmax():
    hidden, weight, _, _, _ = _inputs()
    p = torch.softmax(hidden @ weight.t() / T, dim=-1)
    got = linear_sum_pi_squared(hidden.detach().reshape(1, N, D), weight.detach(), T, chunk=8)
    assert got.shape == (1, N)
    assert _close(got.reshape(-1), (p * p).sum(-1))
