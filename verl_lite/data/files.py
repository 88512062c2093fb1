"""Checks of the data files themselves and of the text in them, with messages that name key, file and row.

`check_parquet_files` runs before anything is read: a path that does not exist, a directory, a file
that cannot be opened, an empty file or one that is not parquet (no `PAR1` magic at both ends) is
reported as exactly that, with the config key. `locate_invalid_utf8` finds the column and row of text
that is not UTF-8 when pandas only says "Wrapping ... failed". `lost_characters` finds characters a
tokenizer drops or cannot represent (a byte-level vocabulary without those bytes, an `<unk>`), so a
prompt of emoji never trains as an empty prompt.
"""

from __future__ import annotations

import os
import string
import unicodedata

PARQUET_MAGIC = b"PAR1"


def as_list(files) -> list[str]:
    if files is None:
        return []
    return [files] if isinstance(files, str) else [str(f) for f in files]


def _parquet_files_in(folder: str) -> list[str]:
    try:
        return sorted(f for f in os.listdir(folder) if f.endswith(".parquet"))[:3]
    except OSError:
        return []


def check_parquet_file(path: str, key: str) -> str | None:
    """One line saying what is wrong with `path` as a parquet file, or None."""
    if os.path.isdir(path):
        inside = _parquet_files_in(path)
        hint = f" (it holds {inside}{', ...' if len(inside) == 3 else ''})" if inside else ""
        return f"{key}: {path!r} is a directory{hint}; give parquet files, e.g. {key}=[{path}/train.parquet]"
    if not os.path.exists(path):
        return f"{key}: {path!r} does not exist; generate it or point {key} at a parquet file"
    if not os.path.isfile(path):
        return f"{key}: {path!r} is not a regular file; point {key} at a parquet file"
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - 4))
            tail = f.read(4)
    except OSError as e:
        return f"{key}: {path!r} cannot be read ({e.strerror}); check its permissions"
    if size == 0:
        return f"{key}: {path!r} is empty (0 bytes); regenerate it"
    if head != PARQUET_MAGIC or tail != PARQUET_MAGIC or size < 12:
        what = "is truncated or not a parquet file" if head == PARQUET_MAGIC else "is not a parquet file"
        return (
            f"{key}: {path!r} {what} (no PAR1 marker at its {'end' if head == PARQUET_MAGIC else 'start'}); "
            "write it with pandas.DataFrame.to_parquet (verl's layout: data_source, prompt, reward_model, ...)"
        )
    return None


def check_parquet_files(files, key: str, required: bool = True) -> list[str]:
    """Problems with every file of `files` (a path or a list) as parquet, named by `key`."""
    paths = as_list(files)
    if required and not paths:
        return [f"{key} is empty; give a parquet file or a list of them"]
    return [p for p in (check_parquet_file(f, key) for f in paths) if p]


def _converts(column, start: int, length: int) -> bool:
    try:
        column.slice(start, length).to_pylist()  # decodes the rows' text (validate() would see the
        return True  # whole child array of a nested column, not just the slice)
    except Exception:  # UnicodeDecodeError, or pyarrow.ArrowException
        return False


def _first_invalid(column) -> int | None:
    """Index of the first row of a pyarrow ChunkedArray whose text is not valid UTF-8, or None."""
    try:
        column.validate(full=True)
        return None
    except Exception:
        pass
    lo, hi = 0, len(column)  # the first bad row is in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _converts(column, lo, mid - lo):
            lo = mid
        else:
            hi = mid
    return lo


def locate_invalid_utf8(path: str) -> tuple[str, int] | None:
    """(column, row) of the first text that is not valid UTF-8 in the parquet file, or None."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    for name in table.column_names:
        row = _first_invalid(table.column(name))
        if row is not None:
            return name, row
    return None


def _chars(text: str) -> set[str]:
    """The characters of `text` as a tokenizer may legitimately normalise them (NFKC, case), no spaces."""
    return set(unicodedata.normalize("NFKC", text).casefold()) - set(string.whitespace)


def lost_characters(text: str, decoded: str) -> list[str]:
    """Characters of `text` that do not come back in `decoded` (its tokens, decoded)."""
    return sorted(_chars(text) - _chars(decoded))
