"""AdamW and its learning-rate schedule (linear warm-up, then constant or cosine), as in verl.

AdamW runs its multi-tensor (`foreach`) implementation on every device. torch picks it by default
only for accelerators; on the host it would step one parameter at a time, and FSDP2's params are
DTensors, whose every op pays a dispatch: ~10 ops per parameter made the tiny model's step cost
as much as its forward. foreach dispatches each op once for all parameters (what a GPU run uses
anyway, and what planner/engine_memory.py counts: its `sqrt(exp_avg_sq)` temporary).

Even foreach, each of the step's ~10 ops on DTensors goes through DTensor's dispatch once, which
for a small model costs about as much as the arithmetic. Every AdamW op is elementwise, so DTensor
runs it on the local shards of params, grads and moments unchanged; `ShardLocalAdamW` calls torch's
own AdamW function on those local shards directly: the same ops on the same tensors (bitwise
torch's step, tests/engine/test_optim.py), while the optimizer keeps the DTensors it was given, so
its state, state dicts and checkpoints are torch's AdamW's."""

from __future__ import annotations

import math

import torch
from torch.distributed.tensor import DTensor
from torch.optim.adam import adam

from verl_lite.config.schema_engine import LR_SCHEDULER_TYPES


def _local(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.to_local() if isinstance(t, DTensor) else t for t in tensors]


class ShardLocalAdamW(torch.optim.AdamW):
    """torch's AdamW whose step runs on the local shards of DTensor params (module docstring)."""

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("ShardLocalAdamW.step takes no closure")
        for group in self.param_groups:
            params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps = [], [], [], [], [], []
            # torch's own bookkeeping: lazily creates the state (as DTensors) and lists what to step
            has_complex = self._init_group(
                group, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps
            )
            beta1, beta2 = group["betas"]
            adam(
                *map(_local, (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs)),
                steps,  # plain host tensors
                amsgrad=group["amsgrad"],
                has_complex=has_complex,
                beta1=beta1,
                beta2=beta2,
                lr=group["lr"],
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                maximize=group["maximize"],
                foreach=group["foreach"],
                capturable=group["capturable"],
                differentiable=group["differentiable"],
                fused=group["fused"],
                grad_scale=None,
                found_inf=None,
                decoupled_weight_decay=group["decoupled_weight_decay"],
            )


def build_optimizer(params, lr: float, betas, weight_decay: float) -> torch.optim.Optimizer:
    return ShardLocalAdamW(params, lr=lr, betas=tuple(betas), weight_decay=weight_decay, foreach=True)


def num_warmup_steps(lr_warmup_steps: int, lr_warmup_steps_ratio: float, total_steps: int) -> int:
    return lr_warmup_steps if lr_warmup_steps > 0 else int(lr_warmup_steps_ratio * total_steps)


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int,
    total_steps: int,
    style: str = "constant",
    min_lr_ratio: float = 0.0,
    num_cycles: float = 0.5,
) -> torch.optim.lr_scheduler.LambdaLR:
    if style not in LR_SCHEDULER_TYPES:
        raise ValueError(f"optim.lr_scheduler_type={style!r} is not one of {list(LR_SCHEDULER_TYPES)}")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        if style == "constant":
            return 1.0
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        cosine = 0.5 * (1.0 + math.cos(math.pi * 2.0 * num_cycles * min(progress, 1.0)))
        return min_lr_ratio + (1.0 - min_lr_ratio) * cosine

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def zero_adamw_state(group: dict, param: torch.Tensor, zeros_like) -> dict:
    """The state AdamW's first step gives `param` (torch/optim/adam.py, `_init_group`), with the
    moments made by `zeros_like(param)` wherever the caller keeps them. Checkpoint loading fills
    it in place, so an optimizer-offloaded engine never creates its state on the device
    (tests/engine/test_optim.py compares it with what a real first step creates)."""
    if group.get("capturable") or group.get("fused"):
        raise ValueError("zero_adamw_state: capturable/fused AdamW keeps `step` on the device")
    step_dtype = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
    state = {"step": torch.tensor(0.0, dtype=step_dtype), "exp_avg": zeros_like(param)}
    state["exp_avg_sq"] = zeros_like(param)
    if group.get("amsgrad"):
        state["max_exp_avg_sq"] = zeros_like(param)
    return state
