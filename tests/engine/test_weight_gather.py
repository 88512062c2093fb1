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


def _plain_gather(rank, world):
    """A column-sharded and a replicated parameter (both gathered one by one, `full_tensor()`):
    the collectives torch runs for them, those the gather counts, and whether the tensors are full."""
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)  # the same full tensors on every rank
    full = {"cols": torch.randn(4, 6), "same": torch.randn(3)}
    module = torch.nn.Module()
    module.cols = torch.nn.Parameter(distribute_tensor(full["cols"], mesh, [Shard(1)]))
    module.same = torch.nn.Parameter(distribute_tensor(full["same"], mesh, [Replicate()]))
    calls = []
    for name in ("all_gather_single", "all_gather_tensor"):  # what full_tensor() all-gathers with
        real = getattr(funcol, name, None)
        if real is not None:

            def counting(*args, real=real, **kwargs):
                calls.append(1)
                return real(*args, **kwargs)

            setattr(funcol, name, counting)
    stats: dict = {}
    out = dict(weight_gather.iter_full_params(module, torch.device("cpu"), stats=stats))
    return len(calls), stats.get("collectives", 0), all(torch.equal(out[n], t) for n, t in full.items())


def test_a_parameter_gathered_one_by_one_counts_a_collective_only_where_one_runs():
    """Over two ranks the column-sharded parameter needs an all-gather and the replicated one none;
    on one rank torch runs none, and none is counted in perf/update_weights_collectives."""
    assert run_ranks(_plain_gather, 2) == [(1, 1, True)] * 2
    assert run_ranks(_plain_gather, 1) == [(0, 0, True)]
