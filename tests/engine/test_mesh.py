"""Rank layouts: HSDP (2-D mesh) gives the update of full sharding; sp/dp groups hold the right ranks."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import OffloadPolicy
from transformers import Qwen2Config, Qwen2ForCausalLM

from tests.helpers.dist import run_ranks
from tests.helpers.models import make_ppo_batch
from verl_lite.algos.logprob import logprobs_from_logits
from verl_lite.engine.mesh import build_layout, check_sp_size, fsdp_mesh_shape
from verl_lite.engine.parallelize import apply_fsdp2, build_mp_policy

STEPS, TOL = 3, 1e-5


def test_fsdp_mesh_shape_follows_verl():
    assert fsdp_mesh_shape(8, -1, "k") == (8,)
    assert fsdp_mesh_shape(8, 8, "k") == (8,)
    assert fsdp_mesh_shape(8, 16, "k") == (8,)
    assert fsdp_mesh_shape(8, 4, "k") == (2, 4)
    assert fsdp_mesh_shape(8, 1, "k") == (8, 1)
    for bad in (0, 3):
        with pytest.raises(ValueError, match=rf"fsdp_size={bad} must divide the 8 ranks.*\[1, 2, 4, 8\]"):
            fsdp_mesh_shape(8, bad, "actor.fsdp_config.fsdp_size")
    with pytest.raises(ValueError, match="ulysses_sequence_parallel_size=3 must divide the 4 ranks"):
        check_sp_size(4, 3, "actor.ulysses_sequence_parallel_size")


def _model():
    config = Qwen2Config(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config)


def _train(fsdp_size: int):
    layout = build_layout("cpu", fsdp_size=fsdp_size)
    model = _model()
    apply_fsdp2(
        model,
        layout.fsdp_mesh,
        reshard_after_forward=True,
        min_num_params=0,
        mp_policy=build_mp_policy("fp32", "fp32", "mp"),
        offload_policy=OffloadPolicy(),
    )
    # eps 1e-6, not 1e-8: k_proj.bias has an exactly-zero gradient in exact arithmetic (softmax ignores a
    # shift shared by all keys), so its fp32 gradient is reduction-order noise that AdamW with eps 1e-8
    # turns into a full lr-sized step (1e-5 apart between the two layouts on some CPUs).
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-6)
    local_numel = sum(p.to_local().numel() for p in model.parameters())
    for step in range(STEPS):  # each rank its own rows; the loss of all rows is the sum of the shares
        b = make_ppo_batch(vocab=97, bs=8, seed=100 * step)
        rows = slice(2 * dist.get_rank(), 2 * dist.get_rank() + 2)
        logits = model(input_ids=b["input_ids"][rows], attention_mask=b["attention_mask"][rows]).logits
        logp = logprobs_from_logits(logits[:, :-1], b["input_ids"][rows, 1:])
        share = (logp * b["attention_mask"][rows, 1:]).sum() / b["attention_mask"].sum()
        (share * layout.world_size).backward()  # FSDP averages over all ranks
        optim.step()
        optim.zero_grad()
    return {n: p.full_tensor() for n, p in model.named_parameters()}, local_numel


def _both(rank, world):
    return {size: _train(size) for size in (-1, 2)}


def _groups(rank, world):
    layout = build_layout("cpu", sp_size=2)
    members = {}
    for name, group in (("sp", layout.sp_group), ("dp", layout.dp_group)):
        ranks = [torch.zeros(1) for _ in range(dist.get_world_size(group))]
        dist.all_gather(ranks, torch.tensor([float(rank)]), group=group)
        members[name] = sorted(int(r) for r in ranks)
    return members, (layout.dp_size, layout.dp_rank, layout.sp_rank)


def test_hsdp_gives_the_update_of_full_sharding():
    results = run_ranks(_both, 4)
    full, full_numel = results[0][-1]
    hsdp, hsdp_numel = results[0][2]
    total = sum(t.numel() for t in full.values())
    assert full_numel < hsdp_numel, "HSDP keeps a larger shard (1/2 instead of 1/4 of the params)"
    assert hsdp_numel >= total // 2 > full_numel
    initial = dict(_model().named_parameters())
    assert max((full[n] - initial[n]).abs().max().item() for n in full) > 1e-3, "the weights moved"
    for rank, by_size in enumerate(results):
        worst = max((by_size[2][0][n] - full[n]).abs().max().item() for n in full)
        assert worst < TOL, f"rank {rank}: HSDP params differ from full sharding by {worst}"


def test_sequence_parallel_groups_are_consecutive_ranks():
    results = run_ranks(_groups, 4)
    for rank, (members, (dp_size, dp_rank, sp_rank)) in enumerate(results):
        assert members["sp"] == [rank - rank % 2, rank - rank % 2 + 1]
        assert members["dp"] == [rank % 2, rank % 2 + 2]
        assert (dp_size, dp_rank, sp_rank) == (2, rank // 2, rank % 2)
