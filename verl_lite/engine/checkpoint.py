"""Engine checkpoints: sharded model and optimizer state, per-rank extras, and the HF export.

One role's folder (e.g. global_step_N/actor/) holds

    model/                         torch.distributed.checkpoint (DCP): one shard file per rank + .metadata
    optimizer/                     DCP, the same way (AdamW moments and step counts, sharded like the params)
    extra_state_world_size_W_rank_R.pt   this rank's lr scheduler, RNG states (torch, numpy, python,
                                   device) and what the worker adds (the rollout's sampling state);
                                   W and R are the role's world size and global rank (verl's names),
                                   not the data-parallel ones: with sequence parallelism every rank
                                   of a dp group has its own RNGs
    huggingface/                   config, generation config, tokenizer; with `hf_model` also the
                                   full weights as safetensors, gathered from every rank, written by global rank 0
    lora_adapter/                  LoRA only: the adapter in PEFT's format (adapter_config.json +
                                   adapter_model.safetensors), what lora_adapter_path and vLLM load

With LoRA, model/ holds only what is trained (the adapters; the critic's value head): the frozen
base is the model folder the run started from, so a checkpoint costs the adapter's bytes, not the
model's, and `hf_model` writes the merged weights (base + adapter folded in).

DCP reads and writes each rank's own shards (DTensors) wherever they live, so the same code serves
every offload mode: saving and loading run inside an engine phase, which brings offloaded params in
and puts them back. The optimizer state is created, before it is read, where the offload mode
keeps it (`offload.init_optimizer_state`: under optimizer_offload directly in host memory, never on
the device) and filled in place there (`offload.load_optimizer_state`). Extras are plain tensors
and numbers, read back with `torch.load(weights_only=True)`.

A checkpoint may come from someone else (trainer.resume_from_path, the model merger), so nothing
in it is unpickled freely: DCP folders are read through engine/dcp_safe.py (an exact (module, name)
allowlist for `.metadata`, `weights_only=True` for every item), extras with `weights_only=True`.
"""

from __future__ import annotations

import errno
import os
import random

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule

# DCP (torch.distributed.checkpoint) and transformers' PreTrainedModel are imported in the functions
# that save and load: ~1 s of imports (PreTrainedModel pulls in torch._dynamo) that a worker pays only
# when it checkpoints, and the driver, which imports the workers' classes, never
from verl_lite.engine.lora import adapter_file_state, hf_module, merged_state_dict, save_adapter
from verl_lite.utils import device as dev
from verl_lite.utils.hf_model import save_hf_folder

CONTENTS = ("model", "optimizer", "extra", "hf_model")
MODEL_DIR, OPTIM_DIR, HF_DIR, LORA_DIR = "model", "optimizer", "huggingface", "lora_adapter"


def extra_state_name(world_size: int, rank: int) -> str:
    return f"extra_state_world_size_{world_size}_rank_{rank}.pt"


def rng_state() -> dict:
    """Every random generator a rank draws from, in a form `torch.load(weights_only=True)` accepts."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos)}
        | {"has_gauss": int(has_gauss), "gauss": float(gauss)},
        "python": random.getstate(),
        "device": dev.get_rng_state(),
    }


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    keys = n["keys"].numpy().astype(np.uint32)
    np.random.set_state((n["kind"], keys, n["pos"], n["has_gauss"], n["gauss"]))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    dev.set_rng_state(state["device"])


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, a read-only folder): one line with the folder."""


def write_failure(error: BaseException | None, depth: int = 0) -> OSError | None:
    """The OSError under a failed write: the error itself, one of DCP's per-rank failures inside a
    CheckpointException, or the error a wrapper was raised from or while handling (torch.save into
    a full disk raises RuntimeError "unexpected pos ..." with the OSError as its context)."""
    if error is None or depth > 8:
        return None
    if isinstance(error, OSError):
        return error
    from torch.distributed.checkpoint.api import CheckpointException

    inner = [e for e, _ in error.failures.values()] if isinstance(error, CheckpointException) else []
    for candidate in [*inner, error.__cause__, error.__context__]:
        found = write_failure(candidate, depth + 1)
        if found is not None:
            return found
    return None


def _no_space_left(path: str) -> bool:
    """Whether the filesystem holding `path` (or its nearest existing parent) has under 1 MiB left:
    a failed write there is the full disk, whatever the writer raised."""
    folder = os.path.abspath(path)
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    try:
        stats = os.statvfs(folder)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < 1 << 20


def save_engine(engine, path: str, contents: list[str], *, extra: dict | None = None, tokenizer=None) -> None:
    """Write `engine`'s state into `path`; every rank calls this together (DCP and the HF gather
    are collectives). `extra` is this rank's worker state, stored beside the scheduler and RNGs.
    A write that fails (no space left, a read-only folder) raises CheckpointWriteError naming the
    folder and the reason in one line, DCP's per-rank tracebacks left out."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        _save_engine(engine, path, contents, extra, tokenizer)
    except (OSError, CheckpointException, RuntimeError) as e:
        cause = write_failure(e)
        if cause is None and _no_space_left(path):  # torch's zip writer: "file write failed", no OSError
            cause = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if cause is None or isinstance(e, CheckpointWriteError):
            raise
        raise CheckpointWriteError(
            cause.errno, f"{cause.strerror or cause} while writing the checkpoint into {path}"
        ) from None


def _save_engine(engine, path: str, contents: list[str], extra: dict | None, tokenizer) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    layout = engine.layout
    with engine.phase("save_checkpoint"):
        if "model" in contents:
            dcp.save(_trained_state(engine), checkpoint_id=os.path.join(path, MODEL_DIR))
        if "optimizer" in contents:
            state = get_optimizer_state_dict(engine.module, engine.optimizer)
            dcp.save(state, checkpoint_id=os.path.join(path, OPTIM_DIR))
        if "extra" in contents:
            payload = {
                "lr_scheduler": engine.lr_scheduler.state_dict() if engine.lr_scheduler else None,
                "rng": rng_state(),
                "worker": extra or {},
            }
            torch.save(payload, os.path.join(path, extra_state_name(layout.world_size, layout.rank)))
        full = _hf_state_dict(engine) if "hf_model" in contents else None
        adapter = _adapter_state(engine) if engine.lora_config is not None else None
    if layout.rank == 0:  # config and tokenizer always: the model merger builds the model from them
        module = hf_module(engine.module)
        generation_config = getattr(module, "generation_config", None)  # None for value models
        hf_dir = os.path.join(path, HF_DIR)
        save_hf_folder(hf_dir, module.config, generation_config, full, tokenizer, hf_model_class(module))
        if adapter is not None:
            save_adapter(os.path.join(path, LORA_DIR), adapter, engine.lora_config)
    if dist.is_initialized():
        dist.barrier(group=engine.mesh.get_group())


def hf_model_class(module: torch.nn.Module) -> type:
    """The HF class under FSDP2's wrapper (fully_shard swaps in a subclass of FSDPModule and it)."""
    from transformers import PreTrainedModel

    return next(
        c for c in type(module).__mro__ if issubclass(c, PreTrainedModel) and not issubclass(c, FSDPModule)
    )


def _trained_state(engine) -> dict:
    """The sharded model state a checkpoint keeps: everything but frozen parameters (LoRA's base)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return {k: v for k, v in get_model_state_dict(engine.module).items() if k not in engine.frozen_names}


def _hf_state_dict(engine) -> dict[str, torch.Tensor]:
    """Unsharded HF weights on global rank 0's host (the other ranks take part in the gather, keep
    nothing); with LoRA, the adapter merged into the base."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    full = get_model_state_dict(engine.module, options=options)
    if engine.lora_config is None or engine.layout.rank != 0:
        return full
    return merged_state_dict(full, engine.lora_config, hf_module(engine.module).config)


def _adapter_state(engine) -> dict[str, torch.Tensor]:
    """The trained tensors, unsharded, in PEFT's file format (every rank gathers; rank 0 writes)."""
    tensors = ((n, t.cpu()) for n, t in engine.iter_full_params(lambda n: n not in engine.frozen_names))
    return adapter_file_state(engine.module, tensors)


def load_engine(engine, path: str, contents: list[str]) -> dict:
    """Restore what `contents` names from `path` (written by `save_engine` with the same world size
    for `extra`); returns the worker's part of this rank's extras ({} without `extra`)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
        set_model_state_dict,
    )

    from verl_lite.engine.dcp_safe import read_dcp

    with engine.phase("load_checkpoint"):
        if "model" in contents:
            state = _trained_state(engine)  # DCP raises if the checkpoint lacks any of these
            read_dcp(state, os.path.join(path, MODEL_DIR))
            set_model_state_dict(engine.module, state, options=StateDictOptions(strict=False))
        if "optimizer" in contents:
            # a fresh optimizer has no state yet: the offload mode creates it where it keeps it
            # (optimizer_offload: on the host), else get_optimizer_state_dict does (a zero-lr step)
            engine.offload.init_optimizer_state()
            state = get_optimizer_state_dict(engine.module, engine.optimizer)
            read_dcp(state, os.path.join(path, OPTIM_DIR))
            engine.offload.load_optimizer_state(state)
    if "extra" not in contents:
        return {}
    world = engine.layout.world_size
    file = os.path.join(path, extra_state_name(world, engine.layout.rank))
    if not os.path.exists(file):
        raise FileNotFoundError(
            f"{file} is missing: a checkpoint's extra state (lr schedule, RNG) is per rank, so resume "
            f"needs the world size it was saved with ({world} workers now)"
        )
    payload = torch.load(file, weights_only=True)
    if engine.lr_scheduler is not None and payload["lr_scheduler"] is not None:
        engine.lr_scheduler.load_state_dict(payload["lr_scheduler"])
    set_rng_state(payload["rng"])
    return payload["worker"]
