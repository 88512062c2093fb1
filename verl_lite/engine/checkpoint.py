"""Engine checkpoints: sharded model and optimizer state, per-rank extras, and the HF export.

One role's folder (e.g. global_step_N/actor/) holds

    model/                         torch.distributed.checkpoint (DCP): one shard file per rank + .metadata
    optimizer/                     DCP, the same way (AdamW moments and step counts, sharded like the params)
    extra_state_world_size_W_rank_R.pt   this rank's lr scheduler, RNG states (torch, numpy, python,
                                   device) and what the worker adds (the rollout's sampling state)
    huggingface/                   config, generation config, tokenizer; with `hf_model` also the
                                   full weights as safetensors, gathered from every rank, written by rank 0

DCP reads and writes each rank's own shards (DTensors) wherever they live, so the same code serves
every offload mode: saving and loading run inside an engine phase, which brings offloaded params in
and puts them back, and `offload.after_load` returns a loaded optimizer state to where the mode
keeps it. Extras are plain tensors and numbers, read back with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from verl_lite.utils import device as dev
from verl_lite.utils.hf_model import save_hf_folder

CONTENTS = ("model", "optimizer", "extra", "hf_model")
MODEL_DIR, OPTIM_DIR, HF_DIR = "model", "optimizer", "huggingface"


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


def save_engine(engine, path: str, contents: list[str], *, extra: dict | None = None, tokenizer=None) -> None:
    """Write `engine`'s state into `path`; every rank calls this together (DCP and the HF gather
    are collectives). `extra` is this rank's worker state, stored beside the scheduler and RNGs."""
    with engine.phase("save_checkpoint"):
        if "model" in contents:
            dcp.save(get_model_state_dict(engine.module), checkpoint_id=os.path.join(path, MODEL_DIR))
        if "optimizer" in contents:
            state = get_optimizer_state_dict(engine.module, engine.optimizer)
            dcp.save(state, checkpoint_id=os.path.join(path, OPTIM_DIR))
        if "extra" in contents:
            payload = {
                "lr_scheduler": engine.lr_scheduler.state_dict() if engine.lr_scheduler else None,
                "rng": rng_state(),
                "worker": extra or {},
            }
            torch.save(payload, os.path.join(path, extra_state_name(engine.dp_size, engine.dp_rank)))
        full = _full_state_dict(engine) if "hf_model" in contents else None
    if engine.dp_rank == 0:  # config and tokenizer always: the model merger builds the model from them
        module = engine.module
        save_hf_folder(os.path.join(path, HF_DIR), module.config, module.generation_config, full, tokenizer)
    if dist.is_initialized():
        dist.barrier(group=engine.mesh.get_group())


def _full_state_dict(engine) -> dict[str, torch.Tensor]:
    """Unsharded weights on rank 0's host (the other ranks take part in the gather, keep nothing)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(engine.module, options=options)


def load_engine(engine, path: str, contents: list[str]) -> dict:
    """Restore what `contents` names from `path` (written by `save_engine` with the same world size
    for `extra`); returns the worker's part of this rank's extras ({} without `extra`)."""
    with engine.phase("load_checkpoint"):
        if "model" in contents:
            state = get_model_state_dict(engine.module)
            dcp.load(state, checkpoint_id=os.path.join(path, MODEL_DIR))
            set_model_state_dict(engine.module, state)
        if "optimizer" in contents:
            # a fresh optimizer has no state yet: get_optimizer_state_dict creates it (a zero-lr step)
            state = get_optimizer_state_dict(engine.module, engine.optimizer)
            dcp.load(state, checkpoint_id=os.path.join(path, OPTIM_DIR))
            set_optimizer_state_dict(engine.module, engine.optimizer, state)
            engine.offload.after_load()
    if "extra" not in contents:
        return {}
    file = os.path.join(path, extra_state_name(engine.dp_size, engine.dp_rank))
    if not os.path.exists(file):
        raise FileNotFoundError(
            f"{file} is missing: a checkpoint's extra state (lr schedule, RNG) is per rank, so resume "
            f"needs the world size it was saved with ({engine.dp_size} workers now)"
        )
    payload = torch.load(file, weights_only=True)
    if engine.lr_scheduler is not None and payload["lr_scheduler"] is not None:
        engine.lr_scheduler.load_state_dict(payload["lr_scheduler"])
    set_rng_state(payload["rng"])
    return payload["worker"]
