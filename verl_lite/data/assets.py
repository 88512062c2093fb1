"""Embedded assets behind `verl_lite://` paths: the tiny model folders and the tasks' parquet files
(the single-turn demo's `tiny-qwen2-arith` and `arith`; the tool demo's `tiny-qwen2-tool` and
`arith-tool`, whose folder also holds the calculator's tool config YAML).

They are built on first use into a cache folder (VERL_LITE_CACHE, default ~/.cache/verl_lite) keyed by
a recipe version, under a file lock and with an atomic rename, so concurrent first uses (parallel
tests, several Ray workers) neither race nor see half-built files. The model is built in a child
process with pinned numerics (data/pinned_build.py), so every machine gets the same weights; the
folder's DONE file records what the build used and the weights' digest.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import yaml

from verl_lite.data import arith, arith_tool, pinned_build

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig

log = logging.getLogger(__name__)

SCHEME = "verl_lite://"
# bump when the model, tokenizer, warm start, task or build pin changes (v7: the tool traces hold the
# turn separator after <|im_end|>, data/chat_render.py, and the tool model learns each trace in one
# row, data/tool_warm_start.py; v6, the separator alone, was never on main)
RECIPE_VERSION = "v7"
ASSETS = {
    "tiny-qwen2-arith": "model",
    "arith": "data",
    "tiny-qwen2-tool": "tool_model",
    "arith-tool": "tool_data",
}


def cache_root() -> Path:
    root = os.environ.get("VERL_LITE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "verl_lite")
    return Path(root) / RECIPE_VERSION


def is_asset(path: str | None) -> bool:
    return isinstance(path, str) and path.startswith(SCHEME)


def resolve(path: str) -> str:
    """A local path for `path`; `verl_lite://name/rest` is built (once) and mapped into the cache."""
    if not is_asset(path):
        return os.path.expanduser(path)
    name, _, rest = path[len(SCHEME) :].partition("/")
    if name not in ASSETS:
        raise ValueError(f"unknown embedded asset {path!r}; known: {[SCHEME + n for n in ASSETS]}")
    try:
        folder = _ensure_built(name)
    except OSError as e:  # the cache folder is a file, read-only, or on a full disk
        raise CacheError(e) from e
    return str(folder / rest) if rest else str(folder)


class CacheError(ValueError):
    """The cache folder of the embedded assets cannot be used: one line naming VERL_LITE_CACHE."""

    def __init__(self, error: OSError):
        env = os.environ.get("VERL_LITE_CACHE")
        named = (
            f"VERL_LITE_CACHE={env!r}"
            if env
            else f"the asset cache {str(cache_root().parent)!r} (VERL_LITE_CACHE unset)"
        )
        where = f": {error.filename}" if error.filename else ""
        super().__init__(
            f"{named} cannot hold the embedded verl_lite:// assets ({error.strerror or error}{where}); "
            "set VERL_LITE_CACHE to a writable folder"
        )


def _ensure_built(name: str) -> Path:
    return build_once(cache_root() / name, _BUILDERS[ASSETS[name]], f"embedded asset {name}")


def build_once(target: Path, build, what: str) -> Path:
    """`target`, made by `build(folder) -> dict` (the build record, kept in its DONE file) if it is not
    there yet: under a file lock beside it, into a temporary folder renamed into place, so concurrent
    first uses neither race nor see half-built files; the lock holder removes what a killed build left."""
    if (target / "DONE").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "DONE").exists():
            for stale in target.parent.glob(f".{target.name}.build-*"):  # a build killed before its rename
                shutil.rmtree(stale, ignore_errors=True)
            tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.build-"))
            start = time.time()
            info = build(tmp) or {}
            (tmp / "DONE").write_text(json.dumps(info | {"seconds": round(time.time() - start, 1)}))
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
            log.info("built %s in %.1fs -> %s", what, time.time() - start, target)
    return target


def _build_model(folder: Path) -> dict:
    info = pinned_build.run_pinned("verl_lite.data.warm_start", str(folder))
    same = pinned_build.matches_reference(info)
    if same is False:
        log.warning(
            "the embedded model built here differs bit-wise from the reference build (weights sha256 %s, "
            "expected %s) although torch, transformers, the CPU kernels and vendor match: please report it",
            info["weights_sha256"],
            pinned_build.REFERENCE["weights_sha256"],
        )
    elif same is None:
        log.info(
            "the embedded model was built with torch %s, transformers %s, %s kernels on a %s CPU; the "
            "reference build (torch %s, transformers %s, %s, %s) may have other bits, so runs may differ in "
            "detail from the documented ones",
            info["torch"],
            info["transformers"],
            info["cpu_capability"],
            info["cpu_vendor"],
            pinned_build.REFERENCE["torch"],
            pinned_build.REFERENCE["transformers"],
            pinned_build.PINNED_CAPABILITY,
            pinned_build.REFERENCE["cpu_vendor"],
        )
    return info


def _build_data(folder: Path) -> dict:
    splits = arith.split_pairs()
    for split in ("train", "test"):
        pd.DataFrame(arith.to_rows(splits[split], split)).to_parquet(folder / f"{split}.parquet")
    return {split: len(splits[split]) for split in ("train", "test")}


def _build_tool_model(folder: Path) -> dict:
    """The tool demo's model (data/tool_warm_start.py); its bits are not compared with REFERENCE,
    which records the single-turn model's."""
    return pinned_build.run_pinned("verl_lite.data.tool_warm_start", str(folder))


def _build_tool_data(folder: Path) -> dict:
    splits = arith_tool.split_pairs()
    for split in ("train", "test"):
        pd.DataFrame(arith_tool.to_rows(splits[split], split)).to_parquet(folder / f"{split}.parquet")
    (folder / "tool_config.yaml").write_text(yaml.safe_dump(arith_tool.TOOL_CONFIG, sort_keys=False))
    return {split: len(splits[split]) for split in ("train", "test")}


_BUILDERS = {
    "model": _build_model,
    "data": _build_data,
    "tool_model": _build_tool_model,
    "tool_data": _build_tool_data,
}


def _resolved(key: str, path: str | None, problems: list[str]) -> str | None:
    if not path:
        return path
    try:
        return resolve(path)
    except CacheError as e:  # the same for every asset: said once
        if str(e) not in problems:
            problems.append(str(e))
        return path
    except ValueError as e:
        problems.append(f"{key}: {e}")
        return path


def resolve_paths(cfg: PPOTrainerConfig, run: Run | None) -> list[str]:
    """The start-up resolve step (verl_lite/preflight.py RESOLVE): every path of the config made
    local, verl_lite:// assets built on first use, ~ expanded."""
    problems: list[str] = []
    for prefix, node, keys in (
        ("actor_rollout_ref.model", cfg.actor_rollout_ref.model, ("path", "tokenizer_path")),
        ("data", cfg.data, ("train_files", "val_files", "tokenizer")),
        ("critic.model", cfg.critic.model, ("path", "tokenizer_path")),
        ("reward_model.model", cfg.reward_model.model, ("path", "input_tokenizer")),
        ("data", cfg.data, ("tool_config_path",)),
        (
            "actor_rollout_ref.rollout.multi_turn",
            cfg.actor_rollout_ref.rollout.multi_turn,
            ("tool_config_path", "interaction_config_path"),
        ),
    ):
        for key in keys:
            value = getattr(node, key)
            if isinstance(value, list):
                setattr(node, key, [_resolved(f"{prefix}.{key}", v, problems) for v in value])
            else:
                setattr(node, key, _resolved(f"{prefix}.{key}", value, problems))
    return problems
