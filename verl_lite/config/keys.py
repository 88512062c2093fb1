"""The schema's key tree, read from the dataclasses and verl 0.9.1's keys they do not declare
(config/verl_keys.py): every dotted key, the dict-typed fields whose contents are the user's
(override_config, reward_kwargs, engine_kwargs, ...), the defaults as written (a link is its `${...}`
string), and the nearest known key to a misspelled one.
"""

from __future__ import annotations

import difflib
import functools
import re
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from verl_lite.config import dialects, verl_keys
from verl_lite.config.schema import PPOTrainerConfig


@functools.cache
def _built() -> tuple[DictConfig, dict[str, Any]]:
    tree = OmegaConf.structured(PPOTrainerConfig)
    added = verl_extras(tree)
    for key, value in added.items():
        OmegaConf.update(tree, key, value, merge=False, force_add=True)
    OmegaConf.set_readonly(tree, True)
    return tree, added


def schema() -> DictConfig:
    """The schema as an (unresolved) OmegaConf tree, verl 0.9.1's undeclared keys added; read-only."""
    return _built()[0]


def added_keys() -> dict[str, Any]:
    """{key: default} of verl 0.9.1's keys the dataclasses do not declare (config/verl_keys.py)."""
    return _built()[1]


def _declared(tree: DictConfig, key: str) -> bool:
    """Whether `tree` has `key`, or a part of it is a leaf there (a dict field: the user's keys)."""
    node = tree
    for part in key.split("."):
        if not isinstance(node, DictConfig) or node._is_none() or node._is_interpolation():
            return True
        if part not in node:
            return False
        node = node._get_node(part)
    return True


def _moved_section(key: str) -> tuple[str, str] | None:
    """(verl 0.9's spelling, the schema's key) of the outermost part of `key` config/dialects.py moves."""
    parts = key.split(".")
    for end in range(1, len(parts) + 1):
        moved = dialects.spelling(".".join(parts[:end]))
        if moved is not None:
            return (moved.given, moved.key) if moved.key != moved.given else None
    return None


def verl_extras(tree: DictConfig) -> dict[str, Any]:
    """{key: its default here} for each key of verl 0.9.1's config `tree` lacks. A verl 0.9 spelling of
    a key (or section) the schema holds (config/dialects.py) links it, so it shows the value the run
    uses; a key it lacks below such a section is added there. Any other key keeps verl's link where it
    links a key the schema declares, else verl's value (a link between two added keys is its value)."""
    written, resolved = verl_keys.facts()
    found = {}
    for key, value in written.items():
        if _declared(tree, key):
            continue
        moved = _moved_section(key)
        if moved is not None and _declared(tree, moved[1]):
            spelled, held = moved
            found[spelled] = f"${{{held}}}"
            inner = f"{held}{key[len(spelled) :]}"
            if not _declared(tree, inner):
                found[inner] = lookup(resolved, key)
            continue
        target = link_target(value, key)
        found[key] = value if target is not None and _declared(tree, target) else lookup(resolved, key)
    return found


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
            if _is_section(child) or key in added:
                sections.add(key)
                walk(child, f"{key}.")
                continue
            leaves.append(key)
            if isinstance(child, DictConfig) and not child._is_interpolation():
                open_dicts.add(key)

    added = {k.rsplit(".", i)[0] for k in added_keys() for i in range(1, k.count(".") + 1)}  # their sections
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


def unknown_in(cfg: DictConfig) -> list[str]:
    """The keys of a composed config that the schema lacks. Hydra refuses such a key inside a typed
    section, but not under a section only verl 0.9.1's facts add (`reward`, `distillation`, ...),
    whose nodes are plain: a config file's key there would reach no field and be dropped."""
    written = OmegaConf.to_container(cfg, resolve=False)
    return [k for k in verl_keys.leaves(written) if not is_known(k)]


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


# `${key}`, `${.key}` / `${..key}` (relative), or `${oc.select:key,default}`: a value that follows one key
_LINK = re.compile(r"^\$\{(?:oc\.select:)?\s*(\.*[\w.]*\w)\s*(?:,[^{}]*)?\}$")


def link_target(written: Any, key: str) -> str | None:
    """The absolute key the value `written` of `key` links to; None for a plain value (or another resolver)."""
    match = _LINK.match(written) if isinstance(written, str) else None
    if match is None:
        return None
    target = match.group(1)
    if not target.startswith("."):
        return target
    parent = key.rsplit(".", 1)[0]
    while target.startswith(".."):
        parent, target = parent.rsplit(".", 1)[0], target[1:]
    return f"{parent}{target}"


_MISSING = object()


def lookup(tree: Any, key: str, default: Any = _MISSING) -> Any:
    """The value at dotted `key` of a config tree (dataclasses, dicts, or both): `default` where a part
    is missing or a section on the way is null (without one, KeyError)."""
    node = tree
    for part in key.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif node is not None and not isinstance(node, dict) and hasattr(node, part):
            node = getattr(node, part)
        elif default is _MISSING:
            raise KeyError(key)
        else:
            return default
    return node


def links_in(cfg: DictConfig) -> dict[str, str]:
    """{key: the key it links to} for every leaf of the composed `cfg` whose value is a `${...}` link:
    the one reading of the links (the value checks name a bad value once, where it was set; a value
    set at start-up reaches the keys that follow it, config/overrides.apply_to_config)."""
    written = OmegaConf.to_container(cfg, resolve=False)
    found = {}
    for key in leaf_keys():
        target = link_target(lookup(written, key, None), key)
        if target is not None:
            found[key] = target
    return found


def links_of(config: Any) -> dict[str, str]:
    """The links of the composed config a typed one was built from (recorded by compose.build_config)."""
    return config.__dict__.get("_links", {})


@functools.cache
def resolved_defaults() -> dict:
    """The schema's defaults with every link resolved (as plain containers)."""
    return OmegaConf.to_container(schema(), resolve=True)


def resolved_default(key: str) -> Any:
    return lookup(resolved_defaults(), key)
