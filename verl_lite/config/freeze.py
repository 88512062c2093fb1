"""Freezing the config: after start-up it is fixed, for the driver and for every worker.

Composition, resolution, start-up normalisation and checks (and trainer.auto_offload's choice)
all happen before any worker is built; then `freeze(cfg)` makes the whole tree read-only. Every
schema dataclass derives from ConfigNode, whose assignments raise once frozen; lists and dicts
become FrozenList / FrozenDict. The flag travels with the objects through pickling, so the config
sections a Ray worker receives are frozen there too: a worker cannot change what the driver and
the other roles see. A changed copy is still possible (`dataclasses.replace`) and is a new object.
"""

from __future__ import annotations

import dataclasses
from typing import Any


class FrozenConfigError(AttributeError):
    """An assignment to a frozen config."""


def _refuse(path: str, what: str):
    raise FrozenConfigError(
        f"config key {path} is frozen: {what}; the config is fixed at start-up, before workers are built "
        "(set it on the command line, or derive a local value instead)"
    )


class ConfigNode:
    """Base of every schema dataclass: assignable until frozen."""

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_frozen", False):
            _refuse(
                f"{self.__dict__.get('_path', type(self).__name__)}.{name}", f"cannot set it to {value!r}"
            )
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if self.__dict__.get("_frozen", False):
            _refuse(f"{self.__dict__.get('_path', type(self).__name__)}.{name}", "cannot delete it")
        object.__delattr__(self, name)


class FrozenList(list):
    """A list that refuses changes (equal to, and pickled as, its items)."""

    def _refuse(self, *args, **kwargs):
        _refuse(getattr(self, "path", "list"), "it is a frozen list")

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def __reduce__(self):
        return FrozenList, (list(self),)


class FrozenDict(dict):
    """A dict that refuses changes (equal to, and pickled as, its items)."""

    def _refuse(self, *args, **kwargs):
        _refuse(getattr(self, "path", "dict"), "it is a frozen dict")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):
        return FrozenDict, (dict(self),)


def _frozen_value(value: Any, path: str) -> Any:
    if dataclasses.is_dataclass(value) and isinstance(value, ConfigNode):
        freeze(value, path)
        return value
    if isinstance(value, list) and not isinstance(value, FrozenList):
        value = FrozenList(_frozen_value(v, f"{path}[{i}]") for i, v in enumerate(value))
    elif isinstance(value, dict) and not isinstance(value, FrozenDict):
        value = FrozenDict({k: _frozen_value(v, f"{path}.{k}") for k, v in value.items()})
    if isinstance(value, (FrozenList, FrozenDict)):
        value.path = path  # named in the error (not pickled)
    return value


def freeze(node: ConfigNode, path: str = "") -> ConfigNode:
    """Make `node` and everything below it read-only (idempotent); returns it."""
    if is_frozen(node):
        return node
    for f in dataclasses.fields(node):
        key = f"{path}.{f.name}" if path else f.name
        object.__setattr__(node, f.name, _frozen_value(getattr(node, f.name), key))
    object.__setattr__(node, "_path", path or type(node).__name__)
    object.__setattr__(node, "_frozen", True)
    return node


def is_frozen(node: Any) -> bool:
    return bool(getattr(node, "__dict__", {}).get("_frozen", False))
