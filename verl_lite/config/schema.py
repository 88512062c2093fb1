"""The typed config schema: every key, its default and its meaning, in one place.

Keys, meanings and defaults are verl's composed ppo_trainer config (verl commit
b178a3cd56f58b2d502255daba591e92833930a7), so a verl command line means here what it means in verl.
verl's links between keys are kept as OmegaConf interpolations in the defaults (`${...}`): the
rollout's lengths follow data's, the ref's and rollout's log-prob batching follow the actor's, the
critic follows the actor, ... The few deliberate deviations are declared beside their fields
(`deviates`; docs/config.md lists them); keys accepted only at some values are in config/support.py. The embedded tiny CPU
demo is a named config on top of this one (conf/demo.yaml).

The sections live in schema_engine.py (FSDP, optimizer, checkpoint), schema_model.py,
schema_actor.py, schema_rollout.py, schema_roles.py (critic, reward) and schema_trainer.py (data,
algorithm, trainer, Ray); this module assembles the tree and re-exports the classes other modules import from it.
Hydra composes conf/ppo_trainer.yaml on top of it (config/compose.py), so an unknown key is an
error. A `verl_lite://` path names an embedded asset built on first use (data/assets.py). The
comment of each field (at the end of its line, or right above it) is its documentation
(docs/config.md is generated from it). A schema dataclass built directly in Python keeps its
`${...}` defaults as strings: build configs through compose (or resolve them with OmegaConf)
wherever a linked key is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl_lite.config.fields import POS_INT, declared, key
from verl_lite.config.freeze import ConfigNode
from verl_lite.config.gates import CRITIC, REF
from verl_lite.config.schema_actor import ActorConfig, RefConfig
from verl_lite.config.schema_engine import (
    CheckpointConfig,
    FSDPConfig,
    MixedPrecisionConfig,
    OptimConfig,
)
from verl_lite.config.schema_model import (
    VERL_MODEL,
    VERL_REWARD_MODEL,
    CriticModelConfig,
    ModelConfig,
    RewardModelModelConfig,
)
from verl_lite.config.schema_roles import (
    CriticConfig,
    CustomRewardFunctionConfig,
    RewardManagerConfig,
    RewardModelConfig,
)
from verl_lite.config.schema_rollout import RolloutConfig
from verl_lite.config.schema_trainer import (
    VERL_TRAIN,
    VERL_VAL,
    AlgorithmConfig,
    DataConfig,
    RayKwargsConfig,
    TrainerConfig,
)

TINY_MODEL = "verl_lite://tiny-qwen2-arith"
TINY_TRAIN = "verl_lite://arith/train.parquet"
TINY_VAL = "verl_lite://arith/test.parquet"

__all__ = [
    "TINY_MODEL",
    "TINY_TRAIN",
    "TINY_VAL",
    "VERL_MODEL",
    "VERL_REWARD_MODEL",
    "VERL_TRAIN",
    "VERL_VAL",
    "ActorConfig",
    "ActorRolloutRefConfig",
    "CheckpointConfig",
    "CriticConfig",
    "CriticModelConfig",
    "FSDPConfig",
    "MixedPrecisionConfig",
    "ModelConfig",
    "OptimConfig",
    "PPOTrainerConfig",
    "RewardModelConfig",
    "RewardModelModelConfig",
    "RolloutConfig",
]


@dataclass
class ActorRolloutRefConfig(ConfigNode):
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = key(factory=RefConfig, gate=REF)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    # seconds a collective may wait before the run fails (trainer.dist_timeout_s follows it)
    nccl_timeout: int | None = key(600, POS_INT)


@dataclass
class PPOTrainerConfig(ConfigNode):
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    data: DataConfig = field(default_factory=DataConfig)
    reward_manager: RewardManagerConfig = field(default_factory=RewardManagerConfig)
    critic: CriticConfig = key(factory=CriticConfig, gate=CRITIC)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    custom_reward_function: CustomRewardFunctionConfig = key(
        factory=CustomRewardFunctionConfig, verl09="reward.custom_reward_function"
    )
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)


# every field of the schema, sections before their keys (config/fields.declared): the one walk
FIELDS = tuple(declared(PPOTrainerConfig))
# where verl_lite's default or a key's meaning differs from verl's: {key: why} (config/fields.key's `deviates`)
DEVIATIONS = {k: f.metadata["deviates"] for k, f in FIELDS if f.metadata.get("deviates")}
