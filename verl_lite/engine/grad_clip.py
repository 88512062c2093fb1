"""Global grad-norm clipping computed on the local shards of FSDP2's DTensor gradients.

`torch.nn.utils.clip_grad_norm_` on DTensor grads runs every op (one norm per grad, the stack, the
total norm, the clip coefficient, the scaling) through DTensor's dispatch, which on a small model
costs more than the arithmetic. What DTensor computes: each grad's 2-norm on its local shard,
"partial" over the mesh dimensions the grads are sharded on; the stack makes them full values first,
x^2 -> all-reduce sum -> x^(1/2) per such dimension (torch/distributed/tensor/_ops/_math_ops.py,
`_NormPartial`; nothing on a dimension of size 1), and the total is the 2-norm of those. The
functions below do exactly those ops on the local tensors (one all-reduce for all the per-grad
norms, elementwise the same sums), so the norm and the clipped grads are bitwise torch's
(tests/engine/test_grad_clip.py compares them on 1 and 2 ranks, uneven shards included)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

NORM_TYPE = 2.0


def _reduce_over_shards(norms: torch.Tensor, grad: DTensor) -> torch.Tensor:
    """(n,) local 2-norms -> the norms over every shard, as DTensor's partial-norm reduction does."""
    mesh = grad.device_mesh
    for dim, placement in enumerate(grad.placements):
        if placement.is_shard() and mesh.size(dim) > 1:
            power = norms**NORM_TYPE
            dist.all_reduce(power, group=mesh.get_group(dim))
            norms = power ** (1.0 / NORM_TYPE)
    return norms


@torch.no_grad()
def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale the grads of `params` (DTensors of one sharding, or plain tensors) so that their global
    2-norm is at most `max_norm` (math.inf: only measure); returns the norm before clipping (a plain
    tensor, the same on every rank)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    sharded = isinstance(grads[0], DTensor)
    if sharded and len({(g.device_mesh, g.placements) for g in grads}) != 1:
        raise ValueError("clip_grad_norm needs grads of one sharding (one FSDP mesh)")
    local = [g.to_local() for g in grads] if sharded else grads
    norms = torch.stack(torch._foreach_norm(local, NORM_TYPE))
    if sharded:
        norms = _reduce_over_shards(norms, grads[0])
    total = torch.linalg.vector_norm(norms, NORM_TYPE)
    clip_coef = float(max_norm) / (total + 1e-6)  # torch's _clip_grads_with_norm_, op for op
    torch._foreach_mul_(local, torch.clamp(clip_coef, max=1.0).to(local[0].device))
    return total
