"""Hydra glue: register the dataclass schema, compose a named config, and build the typed config.

`register_schema()` stores the schema in Hydra's ConfigStore as `ppo_trainer_schema`;
conf/ppo_trainer.yaml lists it first in its defaults, so Hydra type-checks every override.
`build_config` turns the composed DictConfig into dataclasses: verl_lite's support table first
(config/support.py: a refused value is a one-line problem), then interpolations resolved, then
verl's value spellings (config/spellings.py). `compose_config` is what main_ppo's @hydra.main
does, for tests and tools: the same conf/ folder, the same config names (ppo_trainer: verl's
defaults; demo: the embedded tiny run), the same override rules (config/overrides.py).
"""

from __future__ import annotations

import copy

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from verl_lite.config import dialects, keys
from verl_lite.config.errors import ConfigError
from verl_lite.config.keys import links_in
from verl_lite.config.overrides import normalize_argv
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.config.spellings import apply_spellings
from verl_lite.config.support import check_support
from verl_lite.config.user_config import CONF_DIR
from verl_lite.config.user_config import register as register_conf_dir

SCHEMA_NAME = "ppo_trainer_schema"
ADDED = "distillation"  # a section only verl 0.9.1's facts add: the stored node is the whole schema


def register_schema() -> None:
    """The schema in Hydra's ConfigStore, and verl_lite's conf/ on every search path (user configs:
    config/user_config.py). The node is the dataclasses with verl 0.9.1's undeclared keys added
    (config/keys.schema). Stored once per process: building it costs more than half of a
    composition, and Hydra hands every composition a deep copy of it."""
    store = ConfigStore.instance()
    stored = store.repo.get(f"{SCHEMA_NAME}.yaml")
    if (
        stored is None
        or stored.node._metadata.object_type is not PPOTrainerConfig
        or ADDED not in stored.node
    ):
        node = copy.deepcopy(keys.schema())
        OmegaConf.set_readonly(node, False)
        store.store(name=SCHEMA_NAME, node=node)
    register_conf_dir()


def compose_config(
    overrides: list[str] | tuple[str, ...] = (), config_name: str = "ppo_trainer", return_hydra_config=False
) -> DictConfig:
    """The DictConfig `python -m verl_lite.main_ppo --config-name <config_name> <overrides>` composes."""
    register_schema()
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return compose(
            config_name,
            overrides=normalize_argv(list(overrides)),
            return_hydra_config=return_hydra_config,
        )


def to_config(cfg: DictConfig) -> PPOTrainerConfig:
    """The dataclass tree, interpolations resolved as it is built (`cfg` keeps its links)."""
    return OmegaConf.to_object(cfg)


def build_config(cfg: DictConfig) -> PPOTrainerConfig:
    """The typed config of a composed one; ConfigError lists refused values and bad spellings."""
    try:  # the support table reads resolved values too
        problems = [_unknown_line(k) for k in keys.unknown_in(cfg)] + check_support(cfg)
        config = to_config(cfg)
    except InterpolationResolutionError as e:  # OmegaConf names the reference, not the key holding it
        raise ConfigError([unresolvable(cfg, e)]) from e
    problems += apply_spellings(config)
    if problems:
        raise ConfigError(problems)
    object.__setattr__(config, "_links", links_in(cfg))  # for overrides.apply_to_config
    return config


def _unknown_line(key: str) -> str:
    """A config file's key that no field holds (on the command line, config/overrides.py says it)."""
    moved = dialects.spelling(key)
    if moved is not None and moved.key != key and keys.is_known(moved.key):
        return (
            f"{key} (in a config file) is verl 0.9's spelling of {moved.key}, which verl_lite maps on the "
            f"command line only; in a file, write {moved.key}"
        )
    near = keys.nearest(key)
    hint = f"; did you mean {near}?" if near else ""
    return f"{key} (in a config file) is not a key of verl_lite's config (verl's ppo_trainer keys){hint}"


def _strings(node, prefix: str = ""):
    """(dotted key, value) of every string leaf of a plain container."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        path = (
            f"{prefix}.{key}"
            if prefix and isinstance(key, str)
            else f"{prefix}[{key}]"
            if prefix
            else str(key)
        )
        if isinstance(value, str):
            yield path, value
        else:
            yield from _strings(value, path)


def unresolvable(cfg: DictConfig, error: Exception) -> str:
    """One line naming the key whose `${...}` cannot be resolved, its value and the reason: the key
    where it was written, not one whose default links that key."""
    failing: dict[str, tuple[str, str]] = {}
    for key, value in _strings(OmegaConf.to_container(cfg, resolve=False)):
        if "${" not in value:
            continue
        try:
            OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
        except Exception as e:  # InterpolationKeyError, a failing resolver, ...
            failing[key] = (value, str(e).strip().splitlines()[0])  # OmegaConf adds more lines
    for key, (value, reason) in failing.items():
        if keys.link_target(value, key) not in failing:
            return (
                f"{key}={value!r}: {reason}; name an existing key inside ${{...}} (or write the value itself)"
            )
    return " ".join(str(error).split())


def load_config(
    overrides: list[str] | tuple[str, ...] = (), config_name: str = "ppo_trainer"
) -> PPOTrainerConfig:
    """compose_config, built into dataclasses."""
    return build_config(compose_config(overrides, config_name))
