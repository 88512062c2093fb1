"""Ulysses SP on 2 and 4 gloo ranks against the same model on one process (fp32).

Each rank of the group runs the same packed rows, keeps its slice, and gathers per-token log-probs,
entropy and values; these and the parameter gradients (summed over the group, as FSDP's reduction
does) must equal the one-process results within 1e-5. GQA cases cover kv heads that divide sp and kv
heads fewer than sp (replicated), rows whose length sp does not divide (padded), sdpa and eager.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from transformers import Qwen2Config, Qwen2ForCausalLM

from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from tests.helpers.packing import pack_batch
from verl_lite.algos.logprob import entropy_from_logits, logprobs_from_logits
from verl_lite.engine.packing import unpack
from verl_lite.engine.ulysses import apply_ulysses, sequence_parallel, shard_rows

TOL = 1e-5
VOCAB = 97


def _model(heads: int, kv_heads: int, attn: str) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=16 * heads,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=64,
        attn_implementation=attn,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).float()


def _batch(seed: int):
    b = make_ppo_batch(vocab=VOCAB, bs=6, prompt_len=7, response_len=6, seed=seed)
    packed = pack_batch(b["input_ids"], b["attention_mask"], b["position_ids"])
    labels = packed.input_ids.roll(-1, dims=1)  # next token in the row (garbage at a row's last slot)
    weights = torch.randn(packed.input_ids.shape, generator=torch.Generator().manual_seed(seed))
    return packed, labels, weights


def _token_outputs(logits, labels):
    logits = logits.float()
    return logprobs_from_logits(logits, labels), entropy_from_logits(logits)


def _loss(logp, entropy, weights):
    return (logp * weights).sum() + 0.1 * (entropy * weights).sum()


def _reference(heads, kv_heads, attn, seed):
    model = _model(heads, kv_heads, attn)
    packed, labels, weights = _batch(seed)
    logits = model(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False).logits
    logp, entropy = _token_outputs(logits, labels)
    _loss(logp, entropy, weights).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return unpack(logp, packed.plan).detach(), unpack(entropy, packed.plan).detach(), grads, logits.detach()


def _sp_case(rank, group, heads, kv_heads, attn, ckpt, seed):
    model = _model(heads, kv_heads, attn)
    if ckpt:  # attention is recomputed in backward: the context must still be active there
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    apply_ulysses(model, dist.get_world_size(group), "ulysses_sequence_parallel_size")
    packed, labels, weights = _batch(seed)
    shard = shard_rows(packed.position_ids, group)
    with sequence_parallel(group, shard.position_ids):
        logits = model(
            input_ids=shard.take(packed.input_ids),
            position_ids=shard.take(packed.position_ids),
            use_cache=False,
        ).logits
        assert logits.shape[1] == shard.stop - shard.start, "each rank computes its slice only"
        logp, entropy = (shard.gather(t) for t in _token_outputs(logits, shard.take(labels)))
        _loss(logp, entropy, weights).backward()
    grads = {}
    for n, p in model.named_parameters():
        dist.all_reduce(p.grad, group=group)  # what FSDP's reduction sums
        grads[n] = p.grad
    # outside the context the same model is the plain model again
    with torch.no_grad():
        plain = model(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False).logits
    return unpack(logp, packed.plan).detach(), unpack(entropy, packed.plan).detach(), grads, plain


def _all_cases(rank, world, cases, seed):
    """Every case on 4 ranks at once: sp=2 cases run as two groups, {0,1} and {2,3}."""
    groups = {2: [dist.new_group([0, 1]), dist.new_group([2, 3])], 4: [dist.new_group([0, 1, 2, 3])]}
    out = {}
    for case in cases:
        group = groups[case[0]][rank // case[0]]
        out[case] = _sp_case(rank, group, *case[1:], seed)
    return out


CASES = [  # (sp, heads, kv_heads, attn, gradient checkpointing)
    (2, 4, 2, "sdpa", False),
    (2, 4, 1, "eager", True),
    (4, 4, 1, "sdpa", True),
    (4, 8, 2, "sdpa", False),
]
SEED = 5


@pytest.fixture(scope="module")
def sp_results():
    return run_ranks(_all_cases, 4, CASES, SEED)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "sp{}-h{}-kv{}-{}-ckpt{}".format(*c))
def test_sequence_parallel_equals_one_process(sp_results, case):
    _, heads, kv_heads, attn, _ = case
    ref_logp, ref_ent, ref_grads, ref_logits = _reference(heads, kv_heads, attn, SEED)
    assert max(g.abs().max().item() for g in ref_grads.values()) > 1e-3, "gradients must be non-trivial"
    for rank, by_case in enumerate(sp_results):
        logp, entropy, grads, plain = by_case[case]
        assert (logp - ref_logp).abs().max() < TOL, f"rank {rank} log-probs"
        assert (entropy - ref_ent).abs().max() < TOL, f"rank {rank} entropy"
        worst = max((grads[n] - ref_grads[n]).abs().max().item() for n in ref_grads)
        assert worst < TOL, f"rank {rank}: gradients differ by {worst}"
        assert (plain - ref_logits).abs().max() < TOL, "outside sequence_parallel the model is the plain one"


def test_rows_are_padded_to_a_multiple_of_sp():
    packed, _, _ = _batch(SEED)
    assert packed.input_ids.shape[1] % 4 != 0, "the test batch must exercise the padding"


def test_heads_that_sp_does_not_divide_are_refused():
    with pytest.raises(ValueError, match="ulysses_sequence_parallel_size=3.*4 attention heads"):
        apply_ulysses(_model(4, 2, "sdpa"), 3, "ulysses_sequence_parallel_size")
