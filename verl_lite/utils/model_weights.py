"""A model folder's weights against the model its config.json builds, before any worker loads them.

transformers loads a checkpoint whose tensor names or shapes do not fit the model with a report in
its log and exit status 0: a weight renamed in the safetensors header leaves that layer at its
random initialisation, and training runs on. Here the same question is asked of transformers
itself, without reading a single weight: the checkpoint's tensors are described from the
safetensors headers (names, shapes, dtypes) as meta tensors, and `from_pretrained` loads them
into a model built on the meta device, with its own key renaming, prefix handling and tied
weights, and reports what is missing, unexpected or of another shape. Each finding is one line
naming the tensor, the file and the fix. The workers check transformers' report again when they
load (`loading_problems` on the real load), which also covers .bin checkpoints.

What a role's model may leave out: the critic's value head (`score.*`) is new when it starts from
a causal LM, and it drops that model's LM head (`lm_head.*`); a reward model drops the LM head too,
and its per-token head's bias (`score.bias`: a sequence classifier has none; it is set to 0), but
not its trained head (`score.weight`: a folder without one is named as such).
"""

from __future__ import annotations

import json
import os
import struct

import torch
from transformers import AutoModelForCausalLM, AutoModelForTokenClassification
from transformers.models.auto.auto_factory import _get_model_class
from transformers.utils import logging as hf_logging

from verl_lite.utils.model_files import SAFETENSORS_INDEX, read_config

DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
AUTO_CLASS = {"causal_lm": AutoModelForCausalLM, "value": AutoModelForTokenClassification}
AUTO_CLASS["reward"] = AutoModelForTokenClassification
MAY_MISS = {"causal_lm": (), "value": ("score.",), "reward": ("score.bias",)}  # load_reward_model zeroes it
MAY_DROP = {"causal_lm": (), "value": ("lm_head.",), "reward": ("lm_head.",)}


def _header(file: str) -> dict:
    with open(file, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def checkpoint_tensors(path: str) -> dict[str, tuple[list[int], str, str]] | None:
    """{tensor name: (shape, safetensors dtype, file)} from the headers of the folder's safetensors
    files (the index's shards, or every *.safetensors); None when its weights are not safetensors."""
    index = os.path.join(path, SAFETENSORS_INDEX)
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if not files:
        return None
    tensors = {}
    for name in files:
        file = os.path.join(path, name)
        for tensor, info in _header(file).items():
            if tensor != "__metadata__":
                tensors[tensor] = (info["shape"], info["dtype"], file)
    return tensors


def _model_class(config, kind: str):
    return _get_model_class(config, AUTO_CLASS[kind]._model_mapping)


def loading_problems(
    info: dict, key: str, path: str, kind: str, files: dict[str, str] | None = None
) -> list[str]:
    """transformers' loading report (missing, unexpected, mismatched keys) as one line per finding;
    `files`: which file holds each checkpoint tensor (else the folder is named)."""
    files = files or {}
    if kind == "reward" and "score.weight" in info.get("missing_keys", ()):
        return [
            f"{key}={path!r} has no trained score head (score.weight); point it at a reward model saved with "
            "AutoModelForSequenceClassification(num_labels=1)"
        ]
    where = (
        os.path.join(path, "model.safetensors")
        if os.path.exists(os.path.join(path, "model.safetensors"))
        else path
    )
    missing = sorted(k for k in info.get("missing_keys", ()) if not k.startswith(MAY_MISS[kind]))
    unexpected = sorted(k for k in info.get("unexpected_keys", ()) if not k.startswith(MAY_DROP[kind]))
    problems = []
    if missing:
        extra = f"; it has {unexpected[:3]} instead, which the model does not use" if unexpected else ""
        problems.append(
            f"{key}={path!r}: weight {missing[0]}{_more(missing)} is missing from {where}{extra}; that layer "
            "would train from a random initialisation: use the model's own, complete weight files"
        )
    elif unexpected:
        problems.append(
            f"{key}={path!r}: {files.get(unexpected[0], where)} holds {unexpected[0]}{_more(unexpected)}, which "
            "the model its config.json describes has no place for; use the weight files that belong to this config"
        )
    mismatched = sorted(info.get("mismatched_keys", ()), key=lambda m: m[0])
    if mismatched:
        name, found, expected = mismatched[0]
        problems.append(
            f"{key}={path!r}: weight {name} in {files.get(name, where)} has shape {list(found)}, the model its "
            f"config.json describes expects {list(expected)}{_more(mismatched)}; the weights and config.json "
            "are of different models"
        )
    return problems


def _more(names: list[str]) -> str:
    return f" (and {len(names) - 1} more)" if len(names) > 1 else ""


def model_type_problem(path: str, key: str, trust_remote_code: bool) -> str | None:
    """config.json's model_type is one transformers knows (or the folder brings its own code)."""
    from difflib import get_close_matches

    import transformers
    from transformers import CONFIG_MAPPING

    config = read_config(path)
    if trust_remote_code and config.get("auto_map"):
        return None
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in CONFIG_MAPPING:
        return None
    known = sorted(CONFIG_MAPPING.keys())
    close = get_close_matches(str(model_type), known, n=3)
    hint = f"did you mean {close}? " if close else ""
    return (
        f"{key}={path!r}: config.json's model_type={model_type!r} is not a model type transformers "
        f"{transformers.__version__} knows ({len(known)} do, e.g. qwen2, qwen3, llama, mistral, gemma); {hint}"
        "use a folder of a supported model, or a model with its own code (auto_map) and trust_remote_code=True"
    )


def fit_problems(config, path: str, key: str, kind: str) -> list[str]:
    """The folder's safetensors weights loaded, as meta tensors, into the model `config` builds."""
    tensors = checkpoint_tensors(path)
    if tensors is None:
        return []  # .bin weights: the workers' load reports them (loading_problems)
    try:
        model_class = _model_class(config, kind)
    except ValueError:  # a model with its own code (auto_map): the workers' load reports it
        return []
    state = {
        name: torch.empty(shape, dtype=DTYPES.get(dtype, torch.float32), device="meta")
        for name, (shape, dtype, _) in tensors.items()
    }
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # transformers' own report: we give ours
    try:
        _, info = model_class.from_pretrained(
            None,
            config=config,
            state_dict=state,
            device_map="meta",
            output_loading_info=True,
            ignore_mismatched_sizes=True,
        )
    finally:
        hf_logging.set_verbosity(verbosity)
    return loading_problems(info, key, path, kind, {name: t[2] for name, t in tensors.items()})
