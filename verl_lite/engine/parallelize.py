"""Apply FSDP2 to a Hugging Face causal LM: the one call site of `fully_shard` (the meshes it
shards over are built in one place too: engine/mesh.py).

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


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks (its _no_split_modules), in forward order."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    return [m for m in model.modules() if type(m).__name__ in names]


def select_wrapped_modules(model: nn.Module, min_num_params: int) -> list[nn.Module]:
    """The submodules that get their own fully_shard, in forward order (root excluded)."""
    if min_num_params <= 0:
        layers = decoder_layers(model)
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
    forward_prefetch: bool = False,
) -> list[FSDPModule]:
    """Shard `model` in place; returns the wrapped submodules in forward order."""
    wrapped = select_wrapped_modules(model, min_num_params)
    kwargs = dict(
        mesh=mesh,
        reshard_after_forward=reshard_after_forward,
        mp_policy=mp_policy,
        offload_policy=offload_policy,
    )
    for module in wrapped:
        fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    if forward_prefetch:
        apply_explicit_prefetch(wrapped)
    return wrapped


def apply_explicit_prefetch(wrapped: list[FSDPModule]) -> None:
    """Issue the next layer's all-gather when a layer starts (forward) and the previous one's in
    backward, so communication overlaps compute instead of waiting for FSDP2's implicit order."""
    for i, module in enumerate(wrapped):
        if i + 1 < len(wrapped):
            module.set_modules_to_forward_prefetch([wrapped[i + 1]])
        if i > 0:
            module.set_modules_to_backward_prefetch([wrapped[i - 1]])


def build_mp_policy(param_dtype: str, reduce_dtype: str, key: str) -> MixedPrecisionPolicy:
    return MixedPrecisionPolicy(
        param_dtype=parse_dtype(param_dtype, f"{key}.param_dtype"),
        reduce_dtype=parse_dtype(reduce_dtype, f"{key}.reduce_dtype"),
        cast_forward_inputs=True,
    )


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
