"""The two things verl's extension YAMLs (tools, interactions, agent loops) need: read a YAML file and
import a class named by its dotted path, each failing with one line that says which and why.

YAML is read by OmegaConf, as verl reads these files, so `${...}` interpolations resolve the same
way; nothing in the file runs code. The class a file names is imported: that is the file's purpose
(the user names their own class), as with custom_reward_function.path.
"""

from __future__ import annotations

import importlib
import os

from omegaconf import OmegaConf


def load_yaml(path: str, key: str) -> object:
    """The file's content as plain containers; ValueError naming `key` and the path otherwise."""
    if not path or not os.path.isfile(os.path.expanduser(path)):
        what = "is a directory" if path and os.path.isdir(path) else "does not exist"
        raise ValueError(f"{key}={path!r} {what}; point it at the YAML file")
    try:
        return OmegaConf.to_container(OmegaConf.load(os.path.expanduser(path)), resolve=True)
    except Exception as e:  # yaml's and OmegaConf's errors: several types
        raise ValueError(f"{key}={path!r} is not valid YAML: {' '.join(str(e).split())}") from e


def import_class(dotted: str) -> type:
    """`package.module.Class` imported; ValueError saying what failed (module, import, name)."""
    if not isinstance(dotted, str) or "." not in dotted.strip("."):
        raise ValueError(f"{dotted!r} is not a dotted class path like package.module.ClassName")
    module_name, _, name = dotted.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise ValueError(
            f"{dotted}: module {module_name!r} cannot be imported ({e}); put its package on PYTHONPATH"
        ) from e
    except Exception as e:
        raise ValueError(f"{dotted}: importing {module_name!r} raised {type(e).__name__}: {e}") from e
    found = getattr(module, name, None)
    if not isinstance(found, type):
        raise ValueError(f"{dotted}: module {module_name!r} has no class {name!r}")
    return found
