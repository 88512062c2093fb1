"""Vetting a checkpoint's contents on the driver, before Ray or any worker touches it.

checkpoint.check_complete says whether the files are there (and of the size the manifest recorded
at save). This module opens what would be unpickled and reads what the workers would read, so a
checkpoint that is cut short or crafted fails at start-up with exit status 2, naming the file:

- data.pt (the driver's state) and every rank's extra_state file: `torch.load(weights_only=True)`,
  which refuses anything but tensors and plain containers; data.pt must hold a step and the
  sampler's position;
- each DCP folder's `.metadata`: read with the exact (module, name) allowlist of engine/dcp_safe.py;
- each DCP shard file: present and long enough for every chunk `.metadata` places in it; the
  non-tensor items DCP would unpickle (optimizer hyper-parameters) are read with
  `weights_only=True` here first;
- the model each role resumes into is of the size it was saved from: the config.json saved with
  the checkpoint (role/huggingface/) against the model folder's (with override_config), and, for
  tensors both have, the shapes in `.metadata` against the model folder's safetensors headers.
  Otherwise the workers would fail loading shards of the wrong shape, after Ray and every engine
  have started.
"""

from __future__ import annotations

import io
import os
import re

import torch

from verl_lite.engine.checkpoint import HF_DIR, MODEL_DIR, OPTIM_DIR, extra_state_name
from verl_lite.trainer.checkpoint import DATA_FILE, STEP_DIR
from verl_lite.utils.model_files import read_config
from verl_lite.utils.model_weights import checkpoint_tensors

# config.json fields that set a model's tensor shapes
SIZE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
)


def _read_dcp_metadata(folder: str):
    """engine/dcp_safe.read_dcp_metadata, imported when a checkpoint is vetted: DCP (~0.5 s to import)
    is not needed by a run that does not resume."""
    from verl_lite.engine.dcp_safe import read_dcp_metadata

    return read_dcp_metadata(folder)


def _refusal_reason(e: Exception) -> str:
    """What torch.load(weights_only=True) refused, in a few words."""
    text = " ".join(str(e).split())
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
    if found:
        return f"it names {found.group(1)}, which a tensor file never does"
    found = re.search(r"WeightsUnpickler error: (.*?) Check the documentation", text)
    if found:
        return f"the safe unpickler refused it: {found.group(1)}"
    return f"{type(e).__name__}: {text[:200]}"


def _safe_load(file: str, key: str):
    try:
        return torch.load(file, weights_only=True)
    except Exception as e:  # UnpicklingError for crafted files, EOFError/RuntimeError for cut ones
        raise ValueError(
            f"{key}: refusing to load {file}: not a plain tensor file ({_refusal_reason(e)}); "
            "point the resume at a checkpoint written by verl_lite"
        ) from e


def vet_trainer_state(path: str, key: str) -> dict:
    """data.pt, loaded safely and checked for the fields a resume reads."""
    file = os.path.join(path, DATA_FILE)
    state = _safe_load(file, key)
    sampler = state.get("sampler") if isinstance(state, dict) else None
    ok = (
        isinstance(state, dict)
        and isinstance(state.get("global_step"), int)
        and isinstance(sampler, dict)
        and all(isinstance(sampler.get(k), int) for k in ("epoch", "offset"))
    )
    if not ok:
        raise ValueError(
            f"{key}: {file} does not hold a verl_lite trainer state (global_step, sampler.epoch/offset)"
        )
    named = STEP_DIR.match(os.path.basename(os.path.normpath(path)))
    if named and int(named.group(1)) != state["global_step"]:  # the run would resume at the file's step
        raise ValueError(
            f"{key}: {file} says global_step={state['global_step']}, but its folder is step {named.group(1)}; "
            "the file belongs to another checkpoint: point the resume at a checkpoint written whole by verl_lite"
        )
    return state


def _dcp_problems(folder: str, key: str) -> list[str]:
    """Every shard `.metadata` names is present and long enough; its pickled items load safely."""
    try:
        metadata = _read_dcp_metadata(folder)
    except (OSError, ValueError) as e:
        return [f"{key}: {' '.join(str(e).split())}"]
    problems, sizes = [], {}
    for index, info in (metadata.storage_data or {}).items():
        file = os.path.join(folder, info.relative_path)
        if file not in sizes:
            sizes[file] = os.path.getsize(file) if os.path.isfile(file) else None
        if sizes[file] is None:
            problems.append(f"{key}: shard {file} is missing (named by {folder}/.metadata)")
            sizes[file] = -1  # said once
        elif sizes[file] >= 0 and sizes[file] < info.offset + info.length:
            problems.append(
                f"{key}: shard {file} is truncated: {sizes[file]} bytes, its chunks need {info.offset + info.length}"
            )
            sizes[file] = -1
        elif sizes[file] >= 0 and _is_bytes_item(metadata, index) and not info.transform_descriptors:
            with open(file, "rb") as f:
                f.seek(info.offset)
                raw = f.read(info.length)
            try:
                torch.load(io.BytesIO(raw), weights_only=True)
            except Exception as e:
                problems.append(f"{key}: refusing to load {file}: item {index.fqn!r}: {_refusal_reason(e)}")
    return problems


def _is_bytes_item(metadata, index) -> bool:
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    return isinstance(metadata.state_dict_metadata.get(index.fqn), BytesStorageMetadata)


def vet_checkpoint(path: str, roles: dict[str, list[str]], world_size: int, key: str) -> None:
    """Raise ValueError naming `key` and the file when anything a resume would load is unsafe or cut."""
    vet_trainer_state(path, key)
    problems = []
    for role, contents in roles.items():
        folder = os.path.join(path, role)
        for content, sub in (("model", MODEL_DIR), ("optimizer", OPTIM_DIR)):
            if content in contents:
                problems += _dcp_problems(os.path.join(folder, sub), key)
        if "extra" in contents:
            for rank in range(world_size):
                try:
                    _safe_load(os.path.join(folder, extra_state_name(world_size, rank)), key)
                except ValueError as e:
                    problems.append(str(e))
    if problems:
        raise ValueError(
            "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
        )


def _field_differences(saved: dict, model: dict) -> list[str]:
    return [
        f"{name} {saved[name]} there, {model.get(name)} here"
        for name in SIZE_FIELDS
        if name in saved and saved[name] != model.get(name)
    ]


def _shape_differences(folder: str, model_path: str) -> list[str]:
    """Tensors in the checkpoint's model/ and the model folder's safetensors with different shapes."""
    try:
        tensors = checkpoint_tensors(model_path)
        saved = _read_dcp_metadata(folder).state_dict_metadata
    except (OSError, ValueError):
        return []  # other checks name the folder
    differ = []
    for name, (shape, _, _) in (tensors or {}).items():
        item = saved.get(name)
        size = getattr(item, "size", None)
        if size is not None and list(size) != list(shape):
            differ.append(f"{name} is {list(size)} there, {list(shape)} here")
    return differ


def model_size_problems(path: str, models: dict[str, tuple[str, str, dict]], key: str) -> list[str]:
    """`models`: role -> (its model key, the folder it loads, override_config), for the roles whose
    weights the resume loads. One line per role saved from a model of another size."""
    problems = []
    for role, (model_key, model_path, override) in models.items():
        saved_config = os.path.join(path, role, HF_DIR)
        try:
            here = read_config(model_path) | dict(override or {})
            there = (
                read_config(saved_config) if os.path.exists(os.path.join(saved_config, "config.json")) else {}
            )
        except (OSError, ValueError):
            continue  # the model folder's own check names it
        differ = _field_differences(there, here) or _shape_differences(
            os.path.join(path, role, MODEL_DIR), model_path
        )
        if differ:
            problems.append(
                f"{key}: the checkpoint's {role} was saved from a model of another size than {model_key}="
                f"{model_path!r}: {'; '.join(differ[:4])}; resume with the model it was trained from, or "
                "start afresh (trainer.resume_mode=disable)"
            )
    return problems
