"""The fused LM head inside an FSDP2-sharded model: the same log-probs, entropy and gradients as the
logits path, the same parameter names, and a plain head outside a request."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import OffloadPolicy
from transformers import Qwen2Config, Qwen2ForCausalLM

from tests.helpers.dist import run_ranks
from tests.helpers.logits import logprob_entropy_from_logits
from verl_lite.engine.parallelize import apply_fsdp2, build_mp_policy
from verl_lite.engine.token_head import TokenHead, apply_token_head, token_request

TOL, VOCAB, T = 1e-5, 97, 0.8


def _model(tied: bool) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config)


def _inputs():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (3, 10), generator=g)
    return ids, ids.roll(-1, 1), torch.randn(3, 10, generator=g)


def _run(rank, world, tied: bool, fused: bool):
    model = _model(tied)
    names = list(model.state_dict())
    if fused:
        apply_token_head(model)
    apply_fsdp2(
        model,
        init_device_mesh("cpu", (world,)),
        reshard_after_forward=True,
        min_num_params=0,
        mp_policy=build_mp_policy("fp32", "fp32", "mp"),
        offload_policy=OffloadPolicy(),
    )
    ids, labels, weights = _inputs()
    if fused:
        with token_request(model.lm_head, labels, T, entropy=True):
            stats = model(input_ids=ids, use_cache=False).logits
        logp, entropy = stats.unbind(-1)
        plain_shape = model(input_ids=ids, use_cache=False).logits.shape  # outside a request
    else:
        logits = model(input_ids=ids, use_cache=False).logits
        logp, entropy = logprob_entropy_from_logits(logits / T, labels)
        plain_shape = logits.shape
    ((logp + 0.3 * entropy) * weights).sum().backward()
    grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
    same_names = list(model.state_dict()) == names
    return logp.detach(), entropy.detach(), grads, tuple(plain_shape), same_names


def _all(rank, world):
    return {
        (tied, fused): _run(rank, world, tied, fused) for tied in (True, False) for fused in (False, True)
    }


def test_fused_head_matches_logits_path_under_fsdp2():
    results = run_ranks(_all, 2)
    for rank, runs in enumerate(results):
        for tied in (True, False):
            plain, fused = runs[(tied, False)], runs[(tied, True)]
            assert (plain[0] - fused[0]).abs().max() < TOL, f"rank {rank} tied={tied}: log-probs"
            assert (plain[1] - fused[1]).abs().max() < TOL, f"rank {rank} tied={tied}: entropy"
            worst = max((plain[2][n] - fused[2][n]).abs().max().item() for n in plain[2])
            assert worst < TOL, f"rank {rank} tied={tied}: gradients differ by {worst}"
            assert fused[3] == plain[3] == (3, 10, VOCAB), "outside a request the head gives logits"
            assert fused[4], "parameter names unchanged"


def test_apply_token_head_keeps_the_module_and_ties():
    model = _model(tied=True)
    head = model.lm_head
    assert apply_token_head(model) is head and isinstance(head, TokenHead)
    assert head.weight is model.model.embed_tokens.weight
    assert not dist.is_initialized()
