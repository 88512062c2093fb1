"""AdamW's zero state as the checkpoint loader builds it, against what a real first step creates."""

import pytest
import torch

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
