"""Apply FSDP2 to a Hugging Face causal LM: the one call site of `fully_shard` and the one place
that decides whether an engine is sharded at all (the meshes it shards over are built in one place
too: engine/mesh.py).

Which submodules get their own `fully_shard` decides what is gathered at a time: by default every
decoder layer (the model's `_no_split_modules`), so one layer's full params exist during its
forward/backward; with `wrap_policy.min_num_params > 0`, every submodule at least that large whose
children are all smaller. The root module is sharded last and takes the rest (embeddings, norm, head).

One rank with nothing to cast or offload is not sharded (`shards_params`): there FSDP2 would only
copy each unit's params into an "unsharded" buffer before its forward and again before its backward,
copy every grad out and back for a reduce-scatter over one rank, and run its hooks around every
unit -- the same numbers, by the same ops, at ~15% of a small model's update (measured at the tiny
model, scripts/bench_update.py). The model then trains as it is: params, grads and AdamW's state are
plain tensors, every phase, offload mode and checkpoint works on them as on one rank's shards
(DCP writes a plain tensor and a one-rank shard alike), and the units are still chosen, so manual
optimizer offload streams the same layers. Mixed precision (FSDP2 casts params for compute and
grads for the reduction), offload_policy (FSDP2's host offload) and any mesh of two or more ranks
keep fully_shard.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
)


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


def shards_params(
    model: nn.Module, mesh: DeviceMesh, mp_policy: MixedPrecisionPolicy, offload_policy: OffloadPolicy
) -> bool:
    """Whether `model` is sharded with fully_shard (module docstring): always on two or more ranks;
    on one, only when FSDP2 casts (a param_dtype or reduce_dtype other than the params' own) or
    offloads (CPUOffloadPolicy)."""
    if mesh.size() > 1 or isinstance(offload_policy, CPUOffloadPolicy):
        return True
    dtypes = {p.dtype for p in model.parameters()}
    return any(d is not None and dtypes != {d} for d in (mp_policy.param_dtype, mp_policy.reduce_dtype))


def apply_parallelism(
    model: nn.Module,
    mesh: DeviceMesh,
    *,
    reshard_after_forward: bool,
    min_num_params: int,
    mp_policy: MixedPrecisionPolicy,
    offload_policy: OffloadPolicy,
    forward_prefetch: bool = False,
) -> list[nn.Module]:
    """The engine's model as it trains: sharded in place with FSDP2 where `shards_params` says so,
    else left as it is. Returns the units (what has, or would have, its own fully_shard) in forward
    order either way."""
    if not shards_params(model, mesh, mp_policy, offload_policy):
        own_storage(model)
        return select_wrapped_modules(model, min_num_params)
    return apply_fsdp2(
        model,
        mesh,
        reshard_after_forward=reshard_after_forward,
        min_num_params=min_num_params,
        mp_policy=mp_policy,
        offload_policy=offload_policy,
        forward_prefetch=forward_prefetch,
    )


def own_storage(model: nn.Module) -> None:
    """Give every param storage of its own that can be freed and re-allocated (resized), as FSDP2's
    shards have: a loaded model's may be views of the file it was read from, and param_offload frees
    and refills storages between phases. Tied params stay one Parameter."""
    for param in model.parameters():
        if not param.untyped_storage().resizable():
            param.data = param.data.clone()


def set_gradient_sync(model: nn.Module, sync: bool) -> None:
    """FSDP2's `set_requires_gradient_sync`; an unsharded model has no reduction to defer (its grads
    accumulate in place, in the params' dtype, as FSDP2's would on one rank)."""
    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(sync)


def reshard(model: nn.Module) -> None:
    """Free every FSDP unit's gathered params (a no-op for an unsharded model)."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


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
