"""Reading a torch.distributed.checkpoint (DCP) folder without running anything the folder contains.

A checkpoint may come from someone else (trainer.resume_from_path, a folder shared as "resume from
this run", the model merger), and DCP trusts it: its FileSystemReader unpickles `.metadata` with
plain `pickle.load`, and its default planner reads every non-tensor item with
`torch.load(weights_only=False)`. Either runs any callable a crafted file names. Here:

- `.metadata` is unpickled by `MetadataUnpickler`, which resolves only the exact (module, name)
  pairs in `ALLOWED`: what DCP writes for our checkpoints (found by saving full, LoRA and critic
  checkpoints in every offload mode, world sizes 1 and 2, and walking their pickle opcodes with
  pickletools), plus the other dtypes a model may be saved in. A name with a dot (protocol 4's
  `getattr` chain, e.g. `os.system` reached through a DCP module that imports `os`) and every other
  pair are refused before anything is looked up. The opcodes that reach objects without asking
  `find_class` (EXT1/2/4: copyreg's extension registry; PERSID/BINPERSID) are refused by a scan of
  the opcodes before unpickling. The result must then have the shape DCP's Metadata has (types
  of every field, shard names that stay inside the folder), else it is refused as not a checkpoint.
- `SafeFileSystemReader` hands DCP that vetted Metadata, so DCP never unpickles `.metadata` itself
  (no window between a check and a second, unchecked read of the same file), nor falls back to
  per-rank metadata files.
- `SafeLoadPlanner` reads DCP's non-tensor items (optimizer hyper-parameters) with
  `torch.load(weights_only=True)`. Tensor items DCP already reads with `weights_only=True`.
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

from verl_lite.errors import InputError

METADATA_FILE = ".metadata"
_DCP = "torch.distributed.checkpoint.metadata"
# dtypes a model, its optimizer state or its step counters may be saved in
DTYPES = ("float32", "bfloat16", "float16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")
ALLOWED = frozenset(
    {(_DCP, name) for name in ("Metadata", "MetadataIndex", "StorageMeta", "TensorStorageMetadata")}
    | {(_DCP, name) for name in ("BytesStorageMetadata", "ChunkStorageMetadata", "TensorProperties")}
    | {(_DCP, "_MEM_FORMAT_ENCODING"), ("torch.distributed.checkpoint.filesystem", "_StorageInfo")}
    | {("torch", "Size"), ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath")}
    | {("torch", dtype) for dtype in DTYPES}
)
_BYPASS_OPCODES = {"EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID"}


class MetadataUnpickler(pickle.Unpickler):
    """Resolves only the exact (module, name) pairs of ALLOWED; no dotted names, no persistent ids."""

    def find_class(self, module: str, name: str):
        if "." in name:
            raise pickle.UnpicklingError(f"it asks for the dotted name {module}.{name}")
        if (module, name) not in ALLOWED:
            raise pickle.UnpicklingError(f"it names {module}.{name}, which DCP metadata never does")
        return super().find_class(module, name)

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("it holds a persistent id, which DCP metadata never does")


def unpickle_metadata(raw: bytes):
    """The object a `.metadata` pickle builds, resolving only ALLOWED; raises UnpicklingError."""
    try:
        for op, _, _ in pickletools.genops(raw):
            if op.name in _BYPASS_OPCODES:
                raise pickle.UnpicklingError(f"it uses the {op.name} opcode, which DCP metadata never does")
    except ValueError as e:  # genops: an unknown opcode or a cut pickle
        raise pickle.UnpicklingError(f"it is not a valid pickle ({e})") from e
    return MetadataUnpickler(io.BytesIO(raw)).load()


def _shape_problem(md) -> str | None:
    """What in an unpickled object is not shaped like DCP's Metadata, or None."""
    if not isinstance(md, Metadata):
        return f"it unpickles to a {type(md).__module__}.{type(md).__name__}, not a DCP Metadata"
    if not isinstance(md.state_dict_metadata, dict) or not isinstance(md.storage_data, dict):
        return "its state_dict_metadata or storage_data is not a dict"
    for key, item in md.state_dict_metadata.items():
        if not isinstance(key, str) or not _is_item(item):
            return f"its entry {key!r} is not a tensor or bytes record"
    for index, info in md.storage_data.items():
        if not isinstance(index, MetadataIndex) or not isinstance(index.fqn, str):
            return f"its storage index {index!r} is not a MetadataIndex"
        if not _is_storage_info(info):
            return f"the storage record of {index.fqn!r} is malformed"
        name = info.relative_path
        if os.path.basename(name) != name or name in ("", ".", ".."):
            return f"the storage record of {index.fqn!r} points outside the folder ({name!r})"
    if md.storage_meta is not None and not isinstance(md.storage_meta, StorageMeta):
        return "its storage_meta is not a StorageMeta"
    return None


def _is_item(item) -> bool:
    if isinstance(item, BytesStorageMetadata):
        return True
    if not isinstance(item, TensorStorageMetadata) or not isinstance(item.size, torch.Size):
        return False
    props = item.properties
    chunks = item.chunks
    return (
        isinstance(props, TensorProperties)
        and isinstance(props.dtype, torch.dtype)
        and isinstance(chunks, list)
        and all(
            isinstance(c, ChunkStorageMetadata)
            and isinstance(c.offsets, torch.Size)
            and isinstance(c.sizes, torch.Size)
            for c in chunks
        )
    )


def _is_storage_info(info) -> bool:
    return (
        isinstance(info, _StorageInfo)
        and isinstance(info.relative_path, str)
        and all(isinstance(v, int) and v >= 0 for v in (info.offset, info.length))
        and (
            info.transform_descriptors is None or all(isinstance(d, str) for d in info.transform_descriptors)
        )
    )


def read_dcp_metadata(folder: str) -> Metadata:
    """The DCP checkpoint's Metadata (tensor names, shapes, dtypes, shard files), unpickled with the
    allowlist and checked for shape; InputError (a ValueError) naming the file and why when refused."""
    path = os.path.join(folder, METADATA_FILE)
    with open(path, "rb") as f:
        raw = f.read()
    try:
        metadata = unpickle_metadata(raw)
    except (pickle.UnpicklingError, EOFError, TypeError, KeyError, IndexError, AttributeError) as e:
        # TypeError/KeyError/...: an allowed class or _get_layout called with arguments it rejects
        reason = str(e) if isinstance(e, pickle.UnpicklingError) else f"{type(e).__name__}: {e}"
        raise InputError(f"refusing to load {path}: not a torch.distributed.checkpoint ({reason})") from e
    problem = _shape_problem(metadata)
    if problem:
        raise InputError(f"refusing to load {path}: not a torch.distributed.checkpoint ({problem})")
    return metadata


class SafeFileSystemReader(FileSystemReader):
    """DCP's file reader, handing DCP the Metadata read_dcp_metadata vetted instead of unpickling
    `.metadata` itself. (No **kwargs: DCP then never falls back to per-rank metadata files.)"""

    def __init__(self, path: str, metadata: Metadata):
        super().__init__(path)
        self.vetted = metadata

    def read_metadata(self) -> Metadata:
        if self.vetted.storage_meta is None:
            self.vetted.storage_meta = StorageMeta()
        self.vetted.storage_meta.load_id = self.load_id
        return self.vetted


class SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's default planner, except that non-tensor items are unpickled with weights_only=True."""

    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        loaded = torch.load(value, weights_only=True)
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
        else:
            self.state_dict[read_item.dest_index.fqn] = loaded


def read_dcp(state: dict, folder: str, *, no_dist: bool = False) -> None:
    """Fill `state`'s tensors in place from the DCP checkpoint in `folder`, unpickling nothing unsafe."""
    reader = SafeFileSystemReader(folder, read_dcp_metadata(folder))
    dcp.load(state, storage_reader=reader, planner=SafeLoadPlanner(), no_dist=no_dist)
