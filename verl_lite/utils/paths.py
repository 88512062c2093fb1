"""Can a run write where it was told to? Checked for real, before anything is written there.

Permission bits do not answer it: root ignores them, a read-only mount or a full quota does not
show in them. So a folder is probed by creating (and removing) a small file in it, or, for a
folder the run will create, in its nearest existing parent.
"""

from __future__ import annotations

import os
import tempfile


def _probe(folder: str) -> OSError | None:
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".verl_lite_probe_")
    except OSError as e:
        return e
    os.close(fd)
    os.unlink(name)
    return None


def output_folder_problem(path: str) -> str | None:
    """Why `path` cannot be a folder this process writes into (or creates), or None."""
    full = os.path.abspath(os.path.expanduser(path))
    if os.path.exists(full) and not os.path.isdir(full):
        return "is a file, not a folder"
    parent = full
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"cannot be created: {parent} is a file"
    error = _probe(parent)
    if error is None:
        return None
    reason = error.strerror or str(error)
    if parent == full:
        return f"is not writable ({reason})"
    return f"cannot be created: {parent} is not writable ({reason})"
