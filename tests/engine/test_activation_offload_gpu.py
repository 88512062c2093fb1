"""What only a CUDA device can show for activation offload: side-stream copies give the same gradients
and the peak device memory of a training step falls. Run by scripts/gpu_check.sh."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from verl_lite.engine.activation_offload import ActivationOffload
from verl_lite.engine.offload import TransferLog

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (scripts/gpu_check.sh)"),
]


def _step(offloaded: bool):
    config = Qwen2Config(
        vocab_size=1024,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=2,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).cuda()
    ids = torch.randint(0, 1024, (4, 1024), device="cuda", generator=None)
    log = TransferLog()
    offload = ActivationOffload(torch.device("cuda"), log)
    offload.apply(list(model.model.layers))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    context = offload.training_forward("update") if offloaded else torch.enable_grad()
    with context:
        logits = model(input_ids=ids, use_cache=False).logits
    logits.float().logsumexp(-1).mean().backward()
    offload.flush()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return grads, peak, log.pop()


def test_side_stream_offload_is_exact_and_lowers_the_peak():
    torch.manual_seed(1)
    plain, plain_peak, _ = _step(False)
    torch.manual_seed(1)
    offloaded, off_peak, moves = _step(True)
    for n in plain:
        assert torch.equal(plain[n], offloaded[n]), n
    t = moves["update/activations"]
    assert t.d2h_bytes == t.h2d_bytes > 0 and t.d2h_s > 0
    assert off_peak < 0.8 * plain_peak, f"peak {off_peak / 2**20:.0f} MiB vs {plain_peak / 2**20:.0f} MiB"
