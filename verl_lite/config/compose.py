"""Hydra glue: register the dataclass schema and turn a composed DictConfig into dataclasses.

`register_schema()` stores the schema in Hydra's ConfigStore as `ppo_trainer_schema`;
conf/ppo_trainer.yaml lists it first in its defaults, so Hydra type-checks every override and
rejects unknown keys itself.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from verl_lite.config.schema import PPOTrainerConfig

SCHEMA_NAME = "ppo_trainer_schema"


def register_schema() -> None:
    ConfigStore.instance().store(name=SCHEMA_NAME, node=PPOTrainerConfig)


def to_config(cfg: DictConfig) -> PPOTrainerConfig:
    """Resolve interpolations, then build the dataclass tree."""
    OmegaConf.resolve(cfg)
    return OmegaConf.to_object(cfg)
