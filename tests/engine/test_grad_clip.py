"""clip_grad_norm on the local shards against torch's clip_grad_norm_ on the DTensor grads of the same
FSDP2 model: the same norm and the same clipped grads, bit for bit, on 1 and 2 gloo ranks (2 ranks:
uneven shards, so one rank holds padding)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from tests.helpers.dist import run_ranks
from verl_lite.engine.grad_clip import clip_grad_norm


def sharded_mlp(world: int, seed: int = 0) -> torch.nn.Module:
    """A small FSDP2 model whose first weight (5 rows) shards unevenly over 2 ranks."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    mesh = init_device_mesh("cpu", (world,))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def backward(model: torch.nn.Module, rank: int, step: int = 0) -> None:
    g = torch.Generator().manual_seed(100 * step + rank)
    model(torch.randn(4, 6, generator=g)).pow(2).sum().backward()


def _compare(rank, world):
    model = sharded_mlp(world)
    backward(model, rank)
    params = list(model.parameters())
    grads = [p.grad.to_local().clone() for p in params]
    out = []
    for max_norm in (0.05, math.inf):
        for p, g in zip(params, grads):
            p.grad.to_local().copy_(g)
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm).full_tensor()
        theirs = [p.grad.to_local().clone() for p in params]
        for p, g in zip(params, grads):
            p.grad.to_local().copy_(g)
        mine = clip_grad_norm(params, max_norm)
        assert not isinstance(mine, DTensor)
        out.append((max_norm, norm, mine, theirs, [p.grad.to_local().clone() for p in params], grads))
    return out


@pytest.mark.parametrize("world", [1, 2])
def test_clip_grad_norm_is_torchs_on_dtensor_grads(world):
    ranks = run_ranks(_compare, world)
    for rank_out in ranks:
        for max_norm, theirs_norm, mine_norm, theirs, mine, before in rank_out:
            assert torch.equal(mine_norm, theirs_norm), (max_norm, mine_norm, theirs_norm)
            assert all(torch.equal(a, b) for a, b in zip(mine, theirs)), max_norm
            scaled = max_norm < theirs_norm  # 0.05 is below the norm: the grads shrink
            assert scaled == (max_norm == 0.05)
            assert all(torch.equal(a, b) != scaled for a, b in zip(mine, before) if a.numel()), max_norm
    assert all(torch.equal(out[0][1], ranks[0][0][1]) for out in ranks), "every rank has the global norm"


def test_clip_grad_norm_of_plain_tensors_is_torchs():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5))]
    for p in params:
        p.grad = torch.randn_like(p)
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for c, p in zip(copies, params):
        c.grad = p.grad.clone()
    norm = torch.nn.utils.clip_grad_norm_(copies, max_norm=0.5)
    assert torch.equal(clip_grad_norm(params, 0.5), norm) and norm > 0.5
    assert all(torch.equal(p.grad, c.grad) for p, c in zip(params, copies))
