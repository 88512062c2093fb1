"""The rollout's weight gather: a bucket of shards per all-gather, the same tensors as one by one.

Three gloo ranks, so most of the tiny model's parameters are sharded unevenly (32 rows over 3 ranks
is 11 + 11 + 10) and some rank's chunk is short; with offload_policy the shards live on the host.
Each case runs with both collectives: torch 2.13's all_gather_single and all_gather_into_tensor,
what the gather falls back to on torch 2.11 (the GPU machine's), which lacks the former.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from tests.helpers.configs import fp32_fsdp, tiny_model
from tests.helpers.dist import run_ranks
from verl_lite.engine import weight_gather
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.engine.mesh import build_layout

COLLECTIVES = {"all_gather_single": dist.all_gather_single, "fallback": dist.all_gather_into_tensor}


def test_torch_without_all_gather_single_falls_back_to_all_gather_into_tensor():
    torch_2_11 = SimpleNamespace(all_gather_into_tensor=dist.all_gather_into_tensor)
    assert weight_gather.flat_all_gather(torch_2_11) is dist.all_gather_into_tensor
    assert weight_gather.flat_all_gather(dist) is dist.all_gather_single


def _gather(rank, world, model_dir):
    out = {}
    for collective, real in COLLECTIVES.items():
        calls = []

        def counting(*args, real=real, calls=calls, **kwargs):  # the real collective, counted
            calls.append(1)
            return real(*args, **kwargs)

        weight_gather.ALL_GATHER = counting
        out.update({f"{collective}/{k}": v for k, v in _gather_modes(model_dir, world, calls).items()})
    return out


def _gather_modes(model_dir, world, calls):
    out = {}
    for name, fsdp in {"none": fp32_fsdp(), "policy": fp32_fsdp(offload_policy=True)}.items():
        engine = FSDPEngine(tiny_model(model_dir), fsdp, build_layout("cpu"), role="ref")
        params = dict(engine.module.named_parameters())
        uneven = sum(isinstance(p, DTensor) and p.shape[0] % world != 0 for p in params.values())
        one_by_one = {n: p.full_tensor().clone() for n, p in params.items()}
        stats: dict = {}
        del calls[:]
        bucketed = {n: t.clone() for n, t in engine.iter_full_params(bucket_bytes=64 * 1024, stats=stats)}
        gathers = len(calls)
        bf16 = {
            n: t.clone() for n, t in engine.iter_full_params(bucket_bytes=64 * 1024, dtype=torch.bfloat16)
        }
        out[name] = one_by_one, bucketed, bf16, stats, gathers, len(params), uneven
    return out


def test_bucketed_gather_equals_per_parameter_full_tensors(tiny_model_dir):
    for rank_out in run_ranks(_gather, 3, tiny_model_dir):
        assert len(rank_out) == 4, "both collectives x both offload modes"
        for mode, (one_by_one, bucketed, bf16, stats, gathers, num_params, uneven) in rank_out.items():
            assert uneven > 0, "uneven shards must be part of the check"
            assert list(bucketed) == list(one_by_one)
            for name, full in one_by_one.items():
                assert torch.equal(bucketed[name], full), f"{mode}: {name}"
                assert bf16[name].dtype == torch.bfloat16
                assert torch.equal(bf16[name], full.to(torch.bfloat16)), f"{mode}: {name} in bf16"
            assert gathers == stats["collectives"] < num_params / 4, (mode, gathers, num_params)


def _gather_one_rank(rank, world, model_dir):
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return dist.all_gather_single(*args, **kwargs)

    weight_gather.ALL_GATHER = counting
    return _gather_modes(model_dir, world, calls)


def test_one_rank_gathers_without_a_collective_and_the_same_tensors(tiny_model_dir):
    """One rank holds every row: the bucket is the result, no all-gather runs and none is counted."""
    (rank_out,) = run_ranks(_gather_one_rank, 1, tiny_model_dir)
    for mode, (one_by_one, bucketed, bf16, stats, gathers, _, _) in rank_out.items():
        assert list(bucketed) == list(one_by_one)
        for name, full in one_by_one.items():
            assert torch.equal(bucketed[name], full), f"{mode}: {name}"
            assert torch.equal(bf16[name], full.to(torch.bfloat16)), f"{mode}: {name} in bf16"
        assert gathers == 0 and stats.get("collectives", 0) == 0, (mode, gathers, stats)
