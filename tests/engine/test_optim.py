"""AdamW's zero state as the checkpoint loader builds it, against what a real first step creates; the
local-shard AdamW step against torch's on FSDP2 params."""

import pytest
import torch
from torch.distributed.tensor import DTensor

from tests.helpers.dist import run_ranks
from verl_lite.engine.optim import build_optimizer, zero_adamw_state


@pytest.mark.parametrize("amsgrad", [False, True])
def test_zero_state_has_the_layout_of_a_first_step(amsgrad):
    params = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    optimizer = build_optimizer(params, lr=0.1, betas=(0.9, 0.99), weight_decay=0.01)
    for group in optimizer.param_groups:
        group["amsgrad"] = amsgrad
    made = [zero_adamw_state(optimizer.param_groups[0], p, torch.zeros_like) for p in params]
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for p, mine in zip(params, made):
        real = optimizer.state[p]
        assert list(mine) == list(real)
        for key, value in real.items():
            assert (mine[key].shape, mine[key].dtype, mine[key].device) == (
                value.shape,
                value.dtype,
                value.device,
            )
        assert mine["step"] == 0 and real["step"] == 1


def _step_both(rank, world, steps):
    from tests.engine.test_grad_clip import backward, sharded_mlp

    models = [sharded_mlp(world), sharded_mlp(world)]
    optimizers = [
        torch.optim.AdamW(models[0].parameters(), lr=0.05, betas=(0.9, 0.99), weight_decay=0.1, foreach=True),
        build_optimizer(models[1].parameters(), lr=0.05, betas=(0.9, 0.99), weight_decay=0.1),
    ]
    for step in range(steps):
        for model, optimizer in zip(models, optimizers):
            backward(model, rank, step)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    out = []
    for model, optimizer in zip(models, optimizers):
        params = [p.to_local().clone() for p in model.parameters()]
        state = [
            {
                k: (type(v).__name__, v.to_local().clone() if isinstance(v, DTensor) else v.clone())
                for k, v in s.items()
            }
            for s in (optimizer.state[p] for p in model.parameters())
        ]
        out.append((params, state))
    return out, [p.to_local().clone() for p in sharded_mlp(world).parameters()]


def test_shard_local_adamw_steps_as_torchs_adamw_on_fsdp2_params():
    """Two FSDP2 models on 2 gloo ranks (uneven shards), the same grads, 3 steps with weight decay:
    the local-shard step gives torch's params and state bit for bit, and the state stays DTensors."""
    for (theirs, mine), initial in run_ranks(_step_both, 2, 3):
        assert all(torch.equal(a, b) for a, b in zip(mine[0], theirs[0]))
        assert any(not torch.equal(a, b) for a, b in zip(mine[0], initial) if a.numel()), "the params moved"
        for a, b in zip(mine[1], theirs[1]):
            assert a.keys() == b.keys() == {"step", "exp_avg", "exp_avg_sq"}
            for key in a:
                assert a[key][0] == b[key][0] and torch.equal(a[key][1], b[key][1]), key
        assert theirs[1][0]["exp_avg"][0] == "DTensor"
