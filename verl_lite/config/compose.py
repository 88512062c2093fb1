"""Hydra glue: register the dataclass schema, compose a named config, and turn it into dataclasses.

`register_schema()` stores the schema in Hydra's ConfigStore as `ppo_trainer_schema`;
conf/ppo_trainer.yaml lists it first in its defaults, so Hydra type-checks every override and
rejects unknown keys itself. `compose_config` is what main_ppo's @hydra.main does, for tests and
tools: the same conf/ folder, the same config names (ppo_trainer: verl's defaults; demo: the
embedded tiny run).
"""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from verl_lite.config.schema import PPOTrainerConfig

SCHEMA_NAME = "ppo_trainer_schema"
CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")


def register_schema() -> None:
    ConfigStore.instance().store(name=SCHEMA_NAME, node=PPOTrainerConfig)


def compose_config(
    overrides: list[str] | tuple[str, ...] = (), config_name: str = "ppo_trainer", return_hydra_config=False
) -> DictConfig:
    """The DictConfig `python -m verl_lite.main_ppo --config-name <config_name> <overrides>` composes."""
    register_schema()
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return compose(config_name, overrides=list(overrides), return_hydra_config=return_hydra_config)


def to_config(cfg: DictConfig) -> PPOTrainerConfig:
    """Resolve interpolations, then build the dataclass tree."""
    OmegaConf.resolve(cfg)
    return OmegaConf.to_object(cfg)


def load_config(
    overrides: list[str] | tuple[str, ...] = (), config_name: str = "ppo_trainer"
) -> PPOTrainerConfig:
    """compose_config, resolved into dataclasses."""
    return to_config(compose_config(overrides, config_name))
