"""Read back the records of an offline W&B run (its run-<id>.wandb file), for tests.

wandb >= 0.2x no longer ships a Python reader for its transaction log, so this one follows the
format wandb-core writes: a 7-byte file header (":W&B", magic 0xBEE1, a version byte), then records in
32 KiB blocks, each chunk a 7-byte header (CRC32 seeded with the chunk type, length, type
FULL/FIRST/MIDDLE/LAST) and its bytes; a block tail under 7 bytes is zero padding. Each record
is a `wandb_internal_pb2.Record` protobuf. Checksums are verified, so a misread fails loudly.
"""

from __future__ import annotations

import json
import struct
import zlib

BLOCK = 32768
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def _payloads(data: bytes):
    ident, magic, version = struct.unpack("<4sHB", data[:7])
    assert (ident, magic) == (b":W&B", 0xBEE1) and version in (0, 1), (ident, magic, version)
    pos, pending = 7, b""
    while pos + CHUNK_HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < CHUNK_HEADER:
            pos += room
            continue
        checksum, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        if length == 0 and kind == 0:  # zero padding at the end of a block or of the file
            pos += room
            continue
        chunk = data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF == checksum, f"bad CRC at {pos}"
        pos += CHUNK_HEADER + length
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            yield pending
            pending = b""


def read_records(path: str) -> list:
    from wandb.proto import wandb_internal_pb2 as pb

    with open(path, "rb") as f:
        data = f.read()
    records = []
    for payload in _payloads(data):
        record = pb.Record()
        record.ParseFromString(payload)
        records.append(record)
    return records


def read_history(path: str) -> list[dict]:
    """Every logged row as {key: value}, with `_step` as wandb stores it."""
    rows = []
    for record in read_records(path):
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item}
            )
    return rows


def read_run(path: str):
    for record in read_records(path):
        if record.WhichOneof("record_type") == "run":
            return record.run
    raise AssertionError(f"no run record in {path}")
