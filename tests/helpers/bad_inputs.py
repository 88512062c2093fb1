"""Bad inputs on disk, built once per session: data files, model folders and checkpoints that are wrong
in one way each, next to good ones to compare with.

Everything starts from the embedded tiny assets (verl_lite://), copied and then damaged, so a check
that fires on a damaged copy is known not to fire on the original.
"""

from __future__ import annotations

import copyreg
import json
import os
import pickle
import pickletools
import shutil
import struct
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file, save_file

from verl_lite.data import assets
from verl_lite.trainer import checkpoint as ckpt
from verl_lite.utils.manifest import MANIFEST, write_manifest

SOURCE = "verl_lite/arith"


def _rows(contents: list[str], source: str = SOURCE) -> list[dict]:
    return [
        {
            "data_source": source,
            "prompt": [{"role": "user", "content": c}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "2"},
            "extra_info": {"index": i},
        }
        for i, c in enumerate(contents)
    ]


def _write(path: Path, rows: list[dict]) -> str:
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def _non_utf8_parquet(path: Path) -> str:
    """Row 2's prompt content holds bytes that are not UTF-8, in a column typed as text."""
    raw = pa.array([b"1+1=", b"1+2=", b"\xff\xfe1+3=", b"1+4="], type=pa.binary())
    content = pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())
    messages = pa.StructArray.from_arrays([pa.array(["user"] * len(raw)), content], names=["role", "content"])
    prompt = pa.ListArray.from_arrays(pa.array(range(len(raw) + 1), type=pa.int32()), messages)
    truth = pa.StructArray.from_arrays([pa.array(["2"] * len(raw))], names=["ground_truth"])
    table = pa.table({"data_source": [SOURCE] * len(raw), "prompt": prompt, "reward_model": truth})
    pq.write_table(table, path)
    return str(path)


def build_data_files(root: Path) -> dict[str, str]:
    root.mkdir(parents=True, exist_ok=True)
    train = pd.read_parquet(assets.resolve("verl_lite://arith/train.parquet"))
    good = root / "good.parquet"
    train.head(16).to_parquet(good)
    files = {"good": str(good), "good_val": _write(root / "good_val.parquet", _rows(["1+1=", "2+2="]))}
    (root / "folder").mkdir(exist_ok=True)
    shutil.copy(good, root / "folder" / "train.parquet")
    files["folder"] = str(root / "folder")
    files["empty"] = str(root / "empty.parquet")
    Path(files["empty"]).write_bytes(b"")
    files["csv"] = str(root / "csv.parquet")
    train.head(4).to_csv(files["csv"])
    files["truncated"] = str(root / "truncated.parquet")
    Path(files["truncated"]).write_bytes(good.read_bytes()[:300])
    files["no_prompt"] = _write(root / "no_prompt.parquet", [{"data_source": SOURCE, "question": "1+1="}])
    files["non_utf8"] = _non_utf8_parquet(root / "non_utf8.parquet")
    files["zero_rows"] = str(root / "zero_rows.parquet")
    train.head(0).to_parquet(files["zero_rows"])
    files["emoji"] = _write(root / "emoji.parquet", _rows(["1+1=", "\U0001f600\U0001f600", "1+2=", "3+4="]))
    files["four"] = _write(root / "four.parquet", _rows(["1+1=", "1+2=", "1+3=", "1+4="]))
    files["unknown_source"] = _write(root / "unknown_source.parquet", _rows(["1+1=", "1+2="], "my/task"))
    files["overlong"] = _write(root / "overlong.parquet", _rows(["1+" * 30 + "1="] * 4))
    return files


def _copy_model(root: Path, name: str) -> Path:
    target = root / name
    if not target.exists():
        shutil.copytree(assets.resolve("verl_lite://tiny-qwen2-arith"), target)
    return target


def _edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | changes))


UP = "model.layers.0.mlp.up_proj.weight"


def _edit_header(folder: Path, edit) -> None:
    """Rewrite model.safetensors' JSON header with `edit` (names, shapes); the tensor bytes stay."""
    file = folder / "model.safetensors"
    raw = file.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.dumps(edit(json.loads(raw[8 : 8 + n]))).encode()
    header += b" " * (-len(header) % 8)  # safetensors pads its header to 8 bytes
    file.write_bytes(struct.pack("<Q", len(header)) + header + raw[8 + n :])


def build_model_folders(root: Path) -> dict[str, str]:
    root.mkdir(parents=True, exist_ok=True)
    folders = {"good": str(_copy_model(root, "good"))}
    no_weights = _copy_model(root, "no_weights")
    (no_weights / "model.safetensors").unlink(missing_ok=True)
    truncated = _copy_model(root, "truncated")
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    no_template = _copy_model(root, "no_template")
    (no_template / "chat_template.jinja").unlink(missing_ok=True)
    only_config = root / "only_config"
    only_config.mkdir(exist_ok=True)
    shutil.copy(no_weights / "config.json", only_config / "config.json")
    small_vocab = _copy_model(root, "small_vocab")  # a model of 50 tokens (weights and config agree)
    _edit_config(small_vocab, vocab_size=50)
    weights = load_file(small_vocab / "model.safetensors")
    weights["model.embed_tokens.weight"] = weights["model.embed_tokens.weight"][:50].contiguous()
    save_file(weights, small_vocab / "model.safetensors", metadata={"format": "pt"})
    short = _copy_model(root, "short_positions")
    _edit_config(short, max_position_embeddings=20)
    head16 = _copy_model(root, "head16")
    _edit_config(head16, num_attention_heads=8, num_key_value_heads=4)  # head size 16, same weights
    renamed = _copy_model(root, "renamed_weight")  # a tensor renamed in the safetensors header
    _edit_header(
        renamed, lambda h: {("model.layers.0.mlp.up_prooj.weight" if k == UP else k): v for k, v in h.items()}
    )
    reshaped = _copy_model(root, "reshaped_weight")  # the same bytes, its shape given transposed
    _edit_header(reshaped, lambda h: h | {UP: h[UP] | {"shape": h[UP]["shape"][::-1]}})
    bad_json = _copy_model(root, "bad_json")
    (bad_json / "config.json").write_text(
        '{"model_type": "qwen2",\n  "hidden_size": 64\n  "vocab_size": 115}'
    )
    unknown_type = _copy_model(root, "unknown_model_type")
    _edit_config(unknown_type, model_type="qwen9")
    unknown_arch = _copy_model(root, "unknown_arch")
    _edit_config(unknown_arch, architectures=["NoSuchForCausalLM"])
    sandbox = _copy_model(root, "sandboxed_template")  # the template reaches for a Python attribute
    (sandbox / "chat_template.jinja").write_text(
        "{{ ''.__class__.__mro__ }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    )
    for name, path in [
        ("renamed_weight", renamed),
        ("reshaped_weight", reshaped),
        ("bad_json", bad_json),
        ("unknown_model_type", unknown_type),
        ("unknown_arch", unknown_arch),
        ("sandboxed_template", sandbox),
    ]:
        folders[name] = str(path)
    for name, path in [("no_weights", no_weights), ("truncated", truncated), ("no_template", no_template)]:
        folders[name] = str(path)
    folders |= {"only_config": str(only_config), "small_vocab": str(small_vocab)}
    folders |= {"short_positions": str(short), "head16": str(head16)}
    return folders


class _Runs:
    """A pickle that, if ever unpickled, creates the folder `marker` (so a test can see it ran)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (self.marker, 0o755, True))


def _text(value: str) -> bytes:
    raw = value.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw  # BINUNICODE


def crafted_pickle(module: str, name: str, args: tuple[str, ...], *, stack: bool = True) -> bytes:
    """A protocol-4 pickle, written opcode by opcode, that looks up `module`/`name` (STACK_GLOBAL, or
    the older GLOBAL opcode) and calls it with `args` (REDUCE)."""
    if stack:
        lookup = _text(module) + _text(name) + b"\x93"  # STACK_GLOBAL
    else:
        lookup = b"c" + module.encode() + b"\n" + name.encode() + b"\n"  # GLOBAL
    return b"\x80\x04" + lookup + b"(" + b"".join(map(_text, args)) + b"tR."  # MARK args TUPLE REDUCE STOP


_STRINGS = {
    "SHORT_BINUNICODE",
    "BINUNICODE",
    "BINUNICODE8",
    "UNICODE",
    "STRING",
    "SHORT_BINSTRING",
    "BINSTRING",
}


def pickle_globals(raw: bytes) -> set[tuple[str, str]]:
    """Every (module, name) a pickle looks up, read from its opcodes without unpickling it: GLOBAL and
    INST carry both; STACK_GLOBAL takes the two strings pushed before it (directly or from the memo)."""
    memo, pushed, found = {}, [], set()
    for op, arg, _ in pickletools.genops(raw):
        value = None
        if op.name in _STRINGS:
            value = arg
        elif op.name == "MEMOIZE":
            memo[len(memo)] = pushed[-1] if pushed else None
            continue
        elif op.name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = pushed[-1] if pushed else None
            continue
        elif op.name in ("GET", "BINGET", "LONG_BINGET"):
            value = memo.get(arg)
        elif op.name == "STACK_GLOBAL":
            found.add((pushed[-2], pushed[-1]))
        elif op.name in ("GLOBAL", "INST"):
            found.add(tuple(arg.split(" ", 1)))
        pushed.append(value)
    return found


# Ways a .metadata pickle can try to run code, each built here opcode by opcode; `marker` is created
# (global_via_allowed_module: an attribute set on the os module) only if the payload runs.
METADATA_PAYLOADS = {
    # 1. dotted names (protocol 4 resolves them attribute by attribute): os.system reached through
    # the modules DCP's metadata classes live in (both import os), and through modules with allowed names
    "dotted_via_dcp_filesystem": lambda marker: crafted_pickle(
        "torch.distributed.checkpoint.filesystem", "os.system", (f"touch {marker}",)
    ),
    "dotted_via_dcp_metadata_global_opcode": lambda marker: crafted_pickle(
        "torch.distributed.checkpoint.metadata", "os.system", (f"touch {marker}",), stack=False
    ),
    "dotted_via_pathlib": lambda marker: crafted_pickle("pathlib", "os.system", (f"touch {marker}",)),
    "dotted_via_torch": lambda marker: crafted_pickle(
        "torch", "serialization.os.system", (f"touch {marker}",)
    ),
    # 2. a plain (undotted) global reached through an allowed module: the os module that DCP's
    # metadata module imports, into which BUILD then writes an attribute
    "global_via_allowed_module": lambda marker: (
        b"\x80\x04"
        + _text("torch.distributed.checkpoint.metadata")
        + _text("os")
        + b"\x93}"  # STACK_GLOBAL, EMPTY_DICT
        + _text("VERL_LITE_PICKLE_RAN")
        + b"\x88sb."  # NEWTRUE SETITEM BUILD STOP
    ),
    # 3. REDUCE on callables that are not allowed, found by name or by a copyreg extension code
    "reduce_os_system": lambda marker: crafted_pickle("os", "system", (f"touch {marker}",)),
    "reduce_builtins_exec": lambda marker: crafted_pickle(
        "builtins", "exec", (f"open({str(marker)!r}, 'w').close()",), stack=False
    ),
    "reduce_makedirs": lambda marker: pickle.dumps(_Runs(str(marker))),
    "reduce_extension_code": lambda marker: b"\x80\x04\x82\xe1(" + _text(f"touch {marker}") + b"tR.",
}
EXTENSION_CODE = 0xE1  # reduce_extension_code's EXT1 argument


def register_payload_extension() -> None:
    """What a process would have done for reduce_extension_code's code to mean os.system."""
    if copyreg._inverted_registry.get(EXTENSION_CODE) != ("os", "system"):
        copyreg.add_extension("os", "system", EXTENSION_CODE)


def payload_ran(marker) -> bool:
    return os.path.exists(marker) or hasattr(os, "VERL_LITE_PICKLE_RAN")


def write_checkpoint(folder: Path, world_size: int = 2) -> str:
    """A checkpoint in verl_lite's layout (real DCP folders, extra states, data.pt, manifest) for an
    actor whose resume contents are model, optimizer and extra."""
    root = folder.parent
    tmp = ckpt.begin(str(root), 1)
    actor = Path(tmp) / "actor"
    g = torch.Generator().manual_seed(0)
    weights = {"w": torch.randn(64, 8, generator=g), "b": torch.zeros(8)}
    dcp.save(weights, checkpoint_id=str(actor / "model"), no_dist=True)
    optim = {"state": {"w": {"exp_avg": torch.zeros(64, 8)}}, "param_groups": [{"lr": 0.1, "params": ["w"]}]}
    dcp.save(optim, checkpoint_id=str(actor / "optimizer"), no_dist=True)
    for rank in range(world_size):
        torch.save(
            {"rng": torch.get_rng_state(), "worker": {}},
            actor / f"extra_state_world_size_{world_size}_rank_{rank}.pt",
        )
    ckpt.write_trainer_state(tmp, 1, {"epoch": 0, "offset": 8})
    final = ckpt.commit(str(root), 1, tmp)
    os.replace(final, folder)
    return str(folder)


def damaged_checkpoints(root: Path, marker: str) -> dict[str, str]:
    """Copies of one good checkpoint, each damaged in one way; `marker` appears if a pickle ever runs."""
    good = write_checkpoint(root / "good")
    out = {"good": good}

    def copy(name: str) -> Path:
        target = root / name
        shutil.copytree(good, target)
        out[name] = str(target)
        return target

    shard = next((Path(good) / "actor" / "model").glob("*.distcp")).name
    (copy("deleted_shard") / "actor" / "model" / shard).unlink()
    for name in ("truncated_shard", "truncated_shard_no_manifest"):
        cut = copy(name) / "actor" / "model" / shard
        cut.write_bytes(cut.read_bytes()[:100])
    (root / "truncated_shard_no_manifest" / MANIFEST).unlink()  # an older checkpoint: DCP's metadata
    (copy("no_manifest") / MANIFEST).unlink()  # whole, but nothing can say so
    no_manifest_run = root / "no_manifest_run"  # the same, found by resume_mode=auto
    shutil.copytree(out["no_manifest"], no_manifest_run / "global_step_1")
    (no_manifest_run / ckpt.TRACKER).write_text("1")
    out["no_manifest_run"] = str(no_manifest_run)
    absurd = root / "absurd_step" / "global_step_1"  # data.pt of another step, its manifest agreeing
    shutil.copytree(good, absurd)
    ckpt.write_trainer_state(str(absurd), 10**6, {"epoch": 0, "offset": 8})
    write_manifest(str(absurd))
    out["absurd_step"] = str(absurd)
    payload = pickle.dumps(_Runs(marker))
    crafted = [
        ("unsafe_data", "data.pt", payload),
        ("unsafe_extra", "actor/extra_state_world_size_2_rank_1.pt", payload),
        ("unsafe_metadata", "actor/model/.metadata", payload),
        ("metadata_wrong_type", "actor/optimizer/.metadata", pickle.dumps({"state_dict_metadata": {}})),
    ]
    crafted += [
        (f"metadata_{k}", "actor/model/.metadata", make(marker)) for k, make in METADATA_PAYLOADS.items()
    ]
    for name, rel, raw in crafted:
        target = copy(name)
        (target / rel).write_bytes(raw)
        write_manifest(str(target))  # as a crafted checkpoint would: the manifest agrees with it
    zeroed = copy("zeroed_shard") / "actor" / "model" / shard  # same size, 4 KB of its content zeroed
    with open(zeroed, "r+b") as f:
        f.seek(zeroed.stat().st_size // 2 - 2048)
        f.write(bytes(4096))
    linked = root / "linked_run"  # global_step_1 is a link to a checkpoint outside this run's folder
    linked.mkdir()
    (linked / "global_step_1").symlink_to(good, target_is_directory=True)
    (linked / ckpt.TRACKER).write_text("1")
    out["linked_run"] = str(linked)
    other_size = copy("other_size") / "actor" / "huggingface"  # saved from a model of another size
    other_size.mkdir(parents=True)
    config = json.loads(Path(assets.resolve("verl_lite://tiny-qwen2-arith/config.json")).read_text())
    (other_size / "config.json").write_text(json.dumps(config | {"hidden_size": 256, "num_hidden_layers": 4}))
    write_manifest(str(root / "other_size"))
    corrupt = root / "corrupt_tracker_run"  # the tracker file holds bytes, not a step number
    corrupt.mkdir()
    shutil.copytree(good, corrupt / "global_step_1")
    (corrupt / ckpt.TRACKER).write_bytes(b"\xff\xfe\x00\x01garbage")
    out["corrupt_tracker_run"] = str(corrupt)
    auto = root / "auto_run"  # trainer.resume_mode=auto finds it through the tracker
    auto.mkdir()
    shutil.copytree(out["metadata_dotted_via_dcp_filesystem"], auto / "global_step_1")
    (auto / ckpt.TRACKER).write_text("1")
    out["auto_run"] = str(auto)
    return out
