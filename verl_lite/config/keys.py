"""The schema's key tree, read from the dataclasses: every dotted key, the dict-typed fields whose
contents are the user's (override_config, reward_kwargs, engine_kwargs, ...), the defaults as
written (a link is its `${...}` string), and the nearest known key to a misspelled one.
"""

from __future__ import annotations

import difflib
import functools
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from verl_lite.config.schema import PPOTrainerConfig


@functools.cache
def schema() -> DictConfig:
    """The schema as an (unresolved) OmegaConf tree; read-only."""
    tree = OmegaConf.structured(PPOTrainerConfig)
    OmegaConf.set_readonly(tree, True)
    return tree


def _is_section(node) -> bool:
    """A nested dataclass (its keys are the schema's), not a dict-typed field (its keys are the user's)."""
    if not isinstance(node, DictConfig) or node._is_interpolation() or node._is_none():
        return False
    object_type = node._metadata.object_type
    return object_type is not None and object_type is not dict


@functools.cache
def _tree() -> tuple[tuple[str, ...], frozenset[str], frozenset[str]]:
    leaves: list[str] = []
    sections: set[str] = set()
    open_dicts: set[str] = set()

    def walk(node: DictConfig, prefix: str) -> None:
        for name in node.keys():
            key = f"{prefix}{name}"
            child = node._get_node(name)
            if _is_section(child):
                sections.add(key)
                walk(child, f"{key}.")
                continue
            leaves.append(key)
            if isinstance(child, DictConfig) and not child._is_interpolation():
                open_dicts.add(key)

    walk(schema(), "")
    return tuple(leaves), frozenset(sections), frozenset(open_dicts)


def leaf_keys() -> tuple[str, ...]:
    """Every leaf key (a dict-typed field is one leaf), in schema order."""
    return _tree()[0]


def section_keys() -> frozenset[str]:
    return _tree()[1]


def open_dict_keys() -> frozenset[str]:
    """Dict-typed fields: any key below them is accepted (the user's, e.g. override_config.<hf field>)."""
    return _tree()[2]


def under_open_dict(key: str) -> bool:
    return any(key.startswith(f"{d}.") for d in open_dict_keys())


def is_known(key: str) -> bool:
    return key in leaf_keys() or key in section_keys() or under_open_dict(key)


def has_default(key: str) -> bool:
    """Whether the schema's defaults hold `key` (also a key inside a dict-typed field's default)."""
    return OmegaConf.select(schema(), key, default="<absent>", throw_on_missing=False) != "<absent>"


def nearest(key: str) -> str | None:
    """The known key closest to `key`: a sibling with a similar name, else a similar whole key."""
    parent, _, last = key.rpartition(".")
    known = [*leaf_keys(), *section_keys()]
    siblings = {k.rpartition(".")[2]: k for k in known if k.rpartition(".")[0] == parent}
    match = difflib.get_close_matches(last, list(siblings), n=1, cutoff=0.6)
    if match:
        return siblings[match[0]]
    match = difflib.get_close_matches(key, known, n=1, cutoff=0.85)
    return match[0] if match else None


def written_default(key: str) -> Any:
    """The default as the schema writes it: the `${...}` string for a link, containers as dict/list."""
    return written_value(schema(), key)


def written_value(cfg: DictConfig, key: str) -> Any:
    """A key's value in `cfg` as written (unresolved)."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    value = node._get_node(leaf)._value()
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=False)
    return value


def link_target(written: Any, key: str) -> str | None:
    """The absolute key a `${key}` / `${oc.select:key,default}` value links to; None for a plain value."""
    if not (isinstance(written, str) and written.startswith("${") and written.endswith("}")):
        return None
    target = written[2:-1].removeprefix("oc.select:").split(",")[0].strip()
    if not target.startswith("."):
        return target
    parent = key.rsplit(".", 1)[0]
    while target.startswith(".."):
        parent, target = parent.rsplit(".", 1)[0], target[1:]
    return f"{parent}{target}"


def at(container: dict, key: str, default: Any = None) -> Any:
    """The value at dotted `key` of a plain nested dict (`default` when a part is missing)."""
    node: Any = container
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def links_in(cfg: DictConfig) -> dict[str, str]:
    """{key: the key it links to} for every leaf of `cfg` whose value is a `${...}` link."""
    written = OmegaConf.to_container(cfg, resolve=False)
    found = {}
    for key in leaf_keys():
        target = link_target(at(written, key), key)
        if target is not None:
            found[key] = target
    return found


@functools.cache
def resolved_defaults() -> dict:
    """The schema's defaults with every link resolved (as plain containers)."""
    return OmegaConf.to_container(schema(), resolve=True)


def resolved_default(key: str) -> Any:
    node: Any = resolved_defaults()
    for part in key.split("."):
        node = node[part]
    return node
