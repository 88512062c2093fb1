"""Apply FSDP2 to a Hugging Face causal LM: the one call site of `fully_shard`.

Which submodules get their own `fully_shard` decides what is gathered at a time: by default every
decoder layer (the model's `_no_split_modules`), so one layer's full params exist during its
forward/backward; with `wrap_policy.min_num_params > 0`, every submodule at least that large whose
children are all smaller. The root module is sharded last and takes the rest (embeddings, norm, head).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard


def _num_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def select_wrapped_modules(model: nn.Module, min_num_params: int) -> list[nn.Module]:
    """The submodules that get their own fully_shard, in forward order (root excluded)."""
    if min_num_params <= 0:
        names = set(getattr(model, "_no_split_modules", None) or [])
        layers = [m for m in model.modules() if type(m).__name__ in names]
        if not layers:
            raise ValueError(
                f"{type(model).__name__} lists no _no_split_modules to wrap; "
                "set fsdp_config.wrap_policy.min_num_params to a positive size"
            )
        return layers

    chosen: list[nn.Module] = []

    def visit(module: nn.Module) -> None:
        big_children = [c for c in module.children() if _num_params(c) >= min_num_params]
        if big_children:
            for child in module.children():
                visit(child)
        elif module is not model and _num_params(module) >= min_num_params:
            chosen.append(module)

    visit(model)
    return chosen


def apply_fsdp2(
    model: nn.Module,
    mesh: DeviceMesh,
    *,
    reshard_after_forward: bool,
    min_num_params: int,
    mp_policy: MixedPrecisionPolicy,
    offload_policy: OffloadPolicy,
) -> list[FSDPModule]:
    """Shard `model` in place; returns the wrapped submodules in forward order (for prefetching)."""
    wrapped = select_wrapped_modules(model, min_num_params)
    for module in wrapped:
        fully_shard(
            module,
            mesh=mesh,
            reshard_after_forward=reshard_after_forward,
            mp_policy=mp_policy,
            offload_policy=offload_policy,
        )
    fully_shard(
        model,
        mesh=mesh,
        reshard_after_forward=reshard_after_forward,
        mp_policy=mp_policy,
        offload_policy=offload_policy,
    )
    return wrapped


DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
}


def parse_dtype(name: str, key: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"{key}={name!r} is not a dtype; use one of {sorted(DTYPES)}")
    return DTYPES[name]
