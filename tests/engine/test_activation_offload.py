"""Activation offload: the same gradients, bit for bit, and every byte counted.

A tiny Qwen2 (3 decoder layers, fp32) trains one step on packed rows with and without offload, with
and without gradient checkpointing, in one process and sharded by FSDP2 on 2 gloo ranks.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import OffloadPolicy
from transformers import Qwen2Config, Qwen2ForCausalLM

from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from tests.helpers.packing import pack_batch
from verl_lite.algos.logprob import logprobs_from_logits
from verl_lite.engine.activation_offload import ActivationOffload
from verl_lite.engine.offload import TransferLog
from verl_lite.engine.parallelize import apply_fsdp2, build_mp_policy

LAYERS, HIDDEN, VOCAB = 3, 32, 97


def _model(ckpt: bool) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        num_key_value_heads=1,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    if ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def _step(model, offload: ActivationOffload | None):
    b = make_ppo_batch(vocab=VOCAB, bs=8, prompt_len=9, response_len=7, seed=3)
    packed = pack_batch(b["input_ids"], b["attention_mask"], b["position_ids"])
    context = offload.training_forward("update") if offload else torch.enable_grad()
    with context:
        logits = model(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False).logits
    if offload:
        assert all(not g.keep for g in offload.groups.values()), "originals released after forward"
    logp = logprobs_from_logits(logits, packed.input_ids.roll(-1, 1))
    (logp * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum().backward()
    if offload:
        offload.flush()
    return packed.input_ids.shape


def _run(ckpt: bool, offloaded: bool, shard: bool):
    model = _model(ckpt)
    if shard:
        mp = build_mp_policy("fp32", "fp32", "mixed_precision")
        apply_fsdp2(
            model,
            init_device_mesh("cpu", (dist.get_world_size(),)),
            reshard_after_forward=True,
            min_num_params=0,
            mp_policy=mp,
            offload_policy=OffloadPolicy(),
        )
    log = TransferLog()
    offload = None
    if offloaded:
        offload = ActivationOffload(torch.device("cpu"), log)
        offload.apply(list(model.model.layers))
    shape = _step(model, offload)
    grads = {}
    for n, p in model.named_parameters():
        g = p.grad
        grads[n] = g.full_tensor() if hasattr(g, "full_tensor") else g.clone()
    moves = log.pop().get("update/activations")
    return grads, (moves.d2h_bytes, moves.h2d_bytes) if moves else (0, 0), shape


def _all(rank=0, world=1, shard=False):
    return {(c, o): _run(c, o, shard) for c in (False, True) for o in (False, True)}


def _assert_equal(a, b, label):
    assert a.keys() == b.keys()
    for n in a:
        assert torch.equal(a[n], b[n]), f"{label}: {n} differs"


def test_offload_gives_identical_gradients_and_counts_bytes():
    runs = _all()
    for ckpt in (False, True):
        plain, offloaded = runs[(ckpt, False)], runs[(ckpt, True)]
        _assert_equal(plain[0], offloaded[0], f"checkpointing={ckpt}")
        d2h, h2d = offloaded[1]
        assert d2h == h2d > 0, "every byte that leaves comes back"
    # with checkpointing a layer keeps only its input: layers 1 .. L-1 send it (saved in groups 0 .. L-2),
    # each (rows, width, hidden) fp32
    rows, width = runs[(True, True)][2]
    assert runs[(True, True)][1][0] == (LAYERS - 1) * rows * width * HIDDEN * 4
    assert runs[(False, True)][1][0] > 4 * runs[(True, True)][1][0], "without checkpointing far more is saved"


def test_fsdp2_parameters_are_not_copied():
    """Sharded on 2 ranks, the unsharded weights a layer saves are left alone: the bytes moved are the
    one-process bytes (which hold no parameter either: the model's weights are skipped there too)."""
    single = _all()
    sharded = run_ranks(_all, 2, True)
    for rank_runs in sharded:
        for ckpt in (False, True):
            _assert_equal(rank_runs[(ckpt, False)][0], rank_runs[(ckpt, True)][0], f"FSDP2, ckpt={ckpt}")
        for key in ((False, True), (True, True)):
            assert rank_runs[key][1] == single[key][1], f"{key}: bytes moved differ from one process"
            for n, g in rank_runs[key][0].items():
                assert (g - single[key][0][n]).abs().max() < 1e-6, f"{key}: {n}"
