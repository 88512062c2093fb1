"""A checkpoint's manifest: the size and SHA-256 of every file, recorded at save, checked at load.

Sizes catch a copy cut short; the content hash catches what keeps the size (a block of zeros
written over a shard by a failing disk or a bad copy, a bit flip), which would otherwise resume
silently with wrong weights. Files are hashed streamed (hashlib.file_digest: a fixed buffer, the
GIL released while hashing) by a few threads at once, so a checkpoint of tens of GB costs about
one read of it at the disk's or SHA-256's speed (~1.6 GB/s per core with SHA-NI), and never
holds a file in memory. The trainer commits checkpoints in the background (trainer/checkpoint.py),
so this hashing runs beside the next training step, not in it.

    manifest.json  {"format": 2, "sizes": {relpath: bytes}, "sha256": {relpath: hex}}

Format 1 (sizes only) is still read: its files are checked for size.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor

MANIFEST = "manifest.json"
FORMAT = 2
THREADS = 4


def file_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _hash_all(folder: str, rels: list[str]) -> dict[str, str]:
    with ThreadPoolExecutor(max_workers=min(THREADS, max(1, len(rels)))) as pool:
        digests = pool.map(lambda rel: file_sha256(os.path.join(folder, rel)), rels)
        return dict(zip(rels, digests, strict=True))


def write_manifest(folder: str) -> None:
    """Record the size and hash of every file under `folder` (relative paths) in its manifest.json.
    A symbolic link inside a checkpoint is refused: a checkpoint is plain files."""
    rels = []
    for dirpath, dirs, files in os.walk(folder):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                raise OSError(f"{full} is a symbolic link; a checkpoint holds only plain files")
            rels.append(os.path.relpath(full, folder))
    rels = sorted(r for r in rels if r != MANIFEST)
    sizes = {rel: os.path.getsize(os.path.join(folder, rel)) for rel in rels}
    manifest = {"format": FORMAT, "sizes": sizes, "sha256": _hash_all(folder, rels)}
    with open(os.path.join(folder, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=0)


def read_manifest(folder: str) -> dict | None:
    """The manifest of `folder`, None when it has none (saved before manifests existed); ValueError
    when it is unreadable or malformed."""
    try:
        with open(os.path.join(folder, MANIFEST)) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ValueError(f"{MANIFEST} is unreadable ({e})") from e
    sizes, hashes = (manifest.get(k) if isinstance(manifest, dict) else None for k in ("sizes", "sha256"))
    if not isinstance(sizes, dict) or not (hashes is None or isinstance(hashes, dict)):
        raise ValueError(f"{MANIFEST} is malformed (no 'sizes' table)")
    return {"sizes": sizes, "sha256": hashes or {}}


def manifest_problems(folder: str, prefixes: tuple[str, ...]) -> list[str]:
    """One line per file the manifest lists under `prefixes` (relative paths; () for all) that is
    missing, resized, or whose content no longer has the recorded hash. Sizes first: a resized
    file is not hashed."""
    try:
        manifest = read_manifest(folder)
    except ValueError as e:
        return [str(e)]
    if manifest is None:
        return []
    wrong, to_hash = [], []
    for rel, size in sorted(manifest["sizes"].items()):
        if prefixes and not rel.startswith(prefixes):
            continue
        full = os.path.join(folder, rel)
        if not os.path.isfile(full):
            wrong.append(f"{rel} is missing")
        elif os.path.getsize(full) != size:
            wrong.append(f"{rel} is {os.path.getsize(full)} bytes, {size} when saved")
        elif rel in manifest["sha256"]:
            to_hash.append(rel)
    for rel, digest in _hash_all(folder, to_hash).items():
        if digest != manifest["sha256"][rel]:
            wrong.append(f"{rel} has changed since it was saved (its SHA-256 differs from the manifest's)")
    return wrong
