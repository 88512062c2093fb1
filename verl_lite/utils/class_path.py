"""What verl's extension YAMLs (tools, interactions, agent loops) need: read a YAML file, check an
entry's `class_name` and `config`, and import the class it names (verl's shipped classes resolve by
name to verl_lite's equivalents; other `verl.*` paths import through compat/ or an installed verl),
each failing with one line that says which and why.

YAML is read by OmegaConf, as verl reads these files, so `${...}` interpolations resolve the same
way; nothing in the file runs code. The class a file names is imported: that is the file's purpose
(the user names their own class), as with custom_reward_function.path.
"""

from __future__ import annotations

import importlib
import inspect
import os

from verl_lite.utils.user_code import exits_as_errors
from verl_lite.utils.verl_paths import missing_verl_module, verl_installed


def load_yaml(path: str, key: str) -> object:
    """The file's content as plain containers; ValueError naming `key` and the path otherwise."""
    if not path or not os.path.isfile(os.path.expanduser(path)):
        what = "is a directory" if path and os.path.isdir(path) else "does not exist"
        raise ValueError(f"{key}={path!r} {what}; point it at the YAML file")
    # imported here: rollout/ imports this module, and the GPU machine has no omegaconf
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(OmegaConf.load(os.path.expanduser(path)), resolve=True)
    except Exception as e:  # yaml's and OmegaConf's errors: several types
        raise ValueError(f"{key}={path!r} is not valid YAML: {' '.join(str(e).split())}") from e


def import_class(dotted: str) -> type:
    """`package.module.Class` imported; ValueError saying what failed (module, import, name)."""
    if not isinstance(dotted, str) or "." not in dotted.strip("."):
        raise ValueError(f"{dotted!r} is not a dotted class path like package.module.ClassName")
    module_name, _, name = dotted.rpartition(".")
    with exits_as_errors(  # sys.exit() at import: the run would end with its status, unexplained
        f"{dotted}: importing {module_name!r}",
        module_name,
        fix="a module must not exit when imported",
        error=ValueError,
    ):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            raise ValueError(
                f"{dotted}: module {module_name!r} cannot be imported ({e}); "
                + (missing_verl_module(e) or "put its package on PYTHONPATH")
            ) from e
        except Exception as e:
            raise ValueError(f"{dotted}: importing {module_name!r} raised {type(e).__name__}: {e}") from e
    found = getattr(module, name, None)
    if not isinstance(found, type):
        raise ValueError(f"{dotted}: module {module_name!r} has no class {name!r}")
    return found


def load_target(target: str) -> type:
    """A verl_lite class named as "package.module:Class" (a registry's built-in or verl equivalent)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def read_entry(item, where: str, keys: tuple[str, ...]) -> tuple[str, dict]:
    """An entry of an extension YAML's list: a mapping of `keys` only; its `class_name` (a string)
    and `config` (a mapping, {} when absent)."""
    if not isinstance(item, dict):
        raise ValueError(f"{where} must be a mapping with {list(keys)}, got {item!r}")
    unknown = sorted(set(item) - set(keys))
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; an entry has {list(keys)}")
    class_name, config = item.get("class_name"), item.get("config") or {}
    if not isinstance(class_name, str):
        raise ValueError(f"{where}.class_name must be a dotted class path, got {class_name!r}")
    if not isinstance(config, dict):
        raise ValueError(f"{where}.config must be a mapping, got {config!r}")
    return class_name, config


def resolve_extension_class(
    class_name: str,
    base: type,
    methods: tuple[str, ...],
    equivalents: dict,
    refused: dict | None = None,
    plain_ok: bool = False,
) -> type:
    """The class `class_name` names: verl's shipped ones by name (`equivalents`: to verl_lite's
    "module:Class"; `refused`: the reason), anything else imported by its dotted path, with
    `methods` async as `base` (verl's contract) has them, or, where `plain_ok`, plain methods too
    (a tool's blocking code, run in a thread: agent_loop/tool_calls.py)."""
    kind = base.__name__.removeprefix("Base").lower()  # tool, interaction
    if class_name in equivalents:
        return load_target(equivalents[class_name])
    if class_name in (refused or {}):
        raise ValueError(f"class_name {class_name} is not supported by verl_lite: {refused[class_name]}")
    try:  # a verl path too: verl_lite answers some of verl's modules (compat/), an installed verl all
        cls = import_class(class_name)
    except ValueError:
        if not class_name.startswith("verl.") or verl_installed():
            raise
        article = "an" if kind[0] in "aeiou" else "a"
        raise ValueError(
            f"class_name {class_name} is not supported by verl_lite: verl's class has no equivalent here "
            f"(equivalents exist for {sorted(equivalents)}); write {article} {kind} class of your own"
        ) from None
    if plain_ok:
        missing = [m for m in methods if not callable(getattr(cls, m, None))]
        if missing:
            raise ValueError(
                f"class_name {class_name}: has no methods {missing} (verl's {kind} contract, "
                f"{base.__module__}.{base.__name__}); subclass {base.__name__}"
            )
        return cls
    not_async = [m for m in methods if not inspect.iscoroutinefunction(getattr(cls, m, None))]
    if not_async:
        raise ValueError(
            f"class_name {class_name}: {not_async} must be async methods (verl's {kind} contract, "
            f"{base.__module__}.{base.__name__}); subclass {base.__name__}"
        )
    return cls
