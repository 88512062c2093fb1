"""Checks of a Hugging Face model folder before any worker loads it, each naming the config key and folder.

- weights: a folder with config.json but no weight files, an index naming a missing shard, or a
  safetensors file shorter (or longer) than its own header says (a copy cut short) is reported
  here, not as a loader traceback in every worker. A safetensors file is checked by reading only its
  header: 8 bytes of header length, the JSON header, and the largest tensor end offset.
- tokenizer: a folder without tokenizer files (transformers would load an empty one-token
  tokenizer), a tokenizer without a chat template, token ids beyond the model's vocabulary.
- lengths: prompt + response longer than the model's positions.
"""

from __future__ import annotations

import json
import os
import struct

SAFETENSORS_INDEX = "model.safetensors.index.json"
BIN_INDEX = "pytorch_model.bin.index.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
MAX_HEADER = 100 * 1024**2  # safetensors refuses headers over 100 MB too


def read_config(path: str) -> dict:
    """config.json as a dict; the text config of a multimodal model is merged over the top level.
    ValueError naming the file when it is not a JSON object."""
    file = os.path.join(path, "config.json")
    with open(file, "rb") as f:
        raw = f.read()
    try:
        config = json.loads(raw)
    except ValueError as e:  # JSONDecodeError, or bytes that are not UTF-8
        where = f" at line {e.lineno} column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
        reason = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
        raise ValueError(
            f"{file!r} is not valid JSON ({reason}{where}); fix it or copy the model's config.json again"
        ) from e
    if not isinstance(config, dict):
        raise ValueError(
            f"{file!r} holds a JSON {type(config).__name__}, not an object; copy the model's config.json again"
        )
    return config | (config.get("text_config") or {})


def safetensors_problem(file: str) -> str | None:
    """What is wrong with a safetensors file's size against its header, or None."""
    size = os.path.getsize(file)
    try:
        with open(file, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                return f"{file!r} is truncated: {size} bytes, not even a safetensors header"
            (n,) = struct.unpack("<Q", raw)
            if n > MAX_HEADER or 8 + n > size:
                return f"{file!r} is truncated or not safetensors: header of {n} bytes in a {size}-byte file"
            header = json.loads(f.read(n))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        return f"{file!r} cannot be read as safetensors: {e}"
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
    expected = 8 + n + max(ends, default=0)
    if size != expected:
        how = "truncated" if size < expected else "longer than its header says"
        return f"{file!r} is {how}: {size} bytes, its header needs {expected}; copy the file again"
    return None


def _index_shards(path: str, index: str) -> tuple[list[str], str | None]:
    try:
        with open(os.path.join(path, index)) as f:
            weight_map = json.load(f)["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [], f"{os.path.join(path, index)!r} is not a valid weight index ({e})"
    return sorted(set(weight_map.values())), None


def weight_problems(path: str, key: str) -> list[str]:
    """Problems with the weight files of the model folder `path` (named by config key `key`)."""
    files = set(os.listdir(path))
    for index in (SAFETENSORS_INDEX, BIN_INDEX):
        if index in files:
            shards, problem = _index_shards(path, index)
            if problem:
                return [f"{key}: {problem}"]
            missing = [s for s in shards if s not in files]
            if missing:
                return [f"{key}={path!r}: {index} lists shards that are missing: {missing}; copy them"]
            return [f"{key}: {p}" for s in shards if s.endswith(".safetensors") for p in _st(path, s)]
    weights = sorted(f for f in files if f.endswith(".safetensors")) or [
        f for f in files if f == "pytorch_model.bin"
    ]
    if not weights:
        return [
            f"{key}={path!r} has config.json but no weights (model.safetensors, {SAFETENSORS_INDEX} or "
            "pytorch_model.bin); copy the weight files into the folder"
        ]
    return [f"{key}: {p}" for w in weights if w.endswith(".safetensors") for p in _st(path, w)]


def _st(path: str, name: str) -> list[str]:
    problem = safetensors_problem(os.path.join(path, name))
    return [problem] if problem else []


def tokenizer_files_problem(path: str, key: str) -> str | None:
    """transformers loads an empty one-token tokenizer from a folder with none of these files."""
    files = os.listdir(path)
    if any(f in TOKENIZER_FILES or f.endswith((".tiktoken", ".model")) for f in files):
        return None
    return (
        f"{key}={path!r} has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...); "
        "copy the tokenizer into the folder or set data.tokenizer to a folder that has one"
    )


def tokenizer_problems(tokenizer, key: str, path: str, vocab_size: int | None, model_key: str) -> list[str]:
    """A loaded tokenizer against what the run needs: a vocabulary, a chat template, ids the model has."""
    problems = []
    if len(tokenizer) < 2:
        problems.append(
            f"{key}={path!r} loads a tokenizer with {len(tokenizer)} token(s); it is not a tokenizer"
        )
    if not getattr(tokenizer, "chat_template", None):
        problems.append(
            f"{key}={path!r}: the tokenizer has no chat template (chat_template.jinja or tokenizer_config.json's "
            "chat_template), and prompts are chat messages; use a chat/instruct model's tokenizer or add one"
        )
    if vocab_size is not None:
        top = max(tokenizer.get_vocab().values(), default=-1)
        if top >= vocab_size:
            problems.append(
                f"{key}={path!r} has token ids up to {top}, beyond the model's vocabulary ({model_key}, "
                f"vocab_size={vocab_size}); use the model's own tokenizer"
            )
    return problems


def max_positions(config: dict) -> int | None:
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        if isinstance(config.get(name), int):
            return config[name]
    return None
