"""The typed config schema: every key, its default and its meaning, in one place.

Keys, meanings and defaults are verl's composed ppo_trainer config (verl commit
b178a3cd56f58b2d502255daba591e92833930a7), so a verl command line means here what it means in verl.
verl's links between keys are kept as OmegaConf interpolations in the defaults (`${...}`): the
rollout's lengths follow data's, the ref's and rollout's log-prob batching follow the actor's, the
critic follows the actor, ... The few deliberate deviations are listed in config/deviations.py (and
docs/config.md); keys accepted only at some values are in config/support.py. The embedded tiny CPU
demo is a named config on top of this one (conf/demo.yaml).

The sections live in schema_engine.py (FSDP, optimizer, checkpoint, profiler), schema_model.py,
schema_actor.py, schema_rollout.py, schema_roles.py (critic, reward) and schema_trainer.py (data,
algorithm, trainer, Ray); this module assembles the tree and re-exports every section class.
Hydra composes conf/ppo_trainer.yaml on top of it (config/compose.py), so an unknown key is an
error. A `verl_lite://` path names an embedded asset built on first use (data/assets.py). The
comment after each field is its documentation (docs/config.md is generated from it). A schema
dataclass built directly in Python keeps its `${...}` defaults as strings: build configs through
compose (or resolve them with OmegaConf) wherever a linked key is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl_lite.config.schema_actor import ActorConfig, PolicyLossConfig, RefConfig
from verl_lite.config.schema_engine import (
    CheckpointConfig,
    FSDPConfig,
    MixedPrecisionConfig,
    OptimConfig,
    ProfilerConfig,
    WrapPolicyConfig,
)
from verl_lite.config.schema_model import (
    VERL_MODEL,
    VERL_REWARD_MODEL,
    CriticModelConfig,
    ModelBase,
    ModelConfig,
    RewardModelModelConfig,
)
from verl_lite.config.schema_roles import (
    CriticConfig,
    CustomRewardFunctionConfig,
    RewardManagerConfig,
    RewardModelConfig,
)
from verl_lite.config.schema_rollout import RolloutConfig, SamplingKwargs
from verl_lite.config.schema_trainer import (
    VERL_TRAIN,
    VERL_VAL,
    AlgorithmConfig,
    DataConfig,
    FilterGroupsConfig,
    GlobalProfilerConfig,
    KLControlConfig,
    RayInitConfig,
    RayKwargsConfig,
    TrainerConfig,
    TransferQueueConfig,
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
    "AlgorithmConfig",
    "CheckpointConfig",
    "CriticConfig",
    "CriticModelConfig",
    "CustomRewardFunctionConfig",
    "DataConfig",
    "FSDPConfig",
    "FilterGroupsConfig",
    "GlobalProfilerConfig",
    "KLControlConfig",
    "MixedPrecisionConfig",
    "ModelBase",
    "ModelConfig",
    "OptimConfig",
    "PPOTrainerConfig",
    "PolicyLossConfig",
    "ProfilerConfig",
    "RayInitConfig",
    "RayKwargsConfig",
    "RefConfig",
    "RewardManagerConfig",
    "RewardModelConfig",
    "RewardModelModelConfig",
    "RolloutConfig",
    "SamplingKwargs",
    "TrainerConfig",
    "TransferQueueConfig",
    "WrapPolicyConfig",
]


@dataclass
class ActorRolloutRefConfig:
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    hybrid_engine: bool = True  # actor and rollout share each worker (the only mode)
    nccl_timeout: int = (
        600  # seconds a collective may wait before the run fails (trainer.dist_timeout_s follows it)
    )
<<<<<<< HEAD
    external_lib: str | None = "${actor_rollout_ref.model.external_lib}"  # module imported before loading
    trust_remote_code: bool = "${actor_rollout_ref.model.trust_remote_code}"  # passed to the model loader
    use_remove_padding: bool = False  # pack sequences without padding into one row for forward passes
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)  # the critic's own FSDP2 and offload modes


@dataclass
class CriticConfig:
    strategy: str = "fsdp"  # fsdp | fsdp2: both run FSDP2 (fully_shard)
    optim: OptimConfig = field(
        default_factory=lambda: OptimConfig(lr=1e-5)
    )  # the value model's AdamW and LR schedule
    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    checkpoint: CheckpointConfig = field(
        default_factory=CheckpointConfig
    )  # what the critic's checkpoints hold and what a resume loads (as the actor's)
    ppo_mini_batch_size: int = (
        "${actor_rollout_ref.actor.ppo_mini_batch_size}"  # prompts per critic optimizer step (global)
    )
    ppo_micro_batch_size: int | None = None  # deprecated global micro size; use the per-GPU key
    ppo_micro_batch_size_per_gpu: int | None = (
        "${.ppo_micro_batch_size}"  # responses per forward/backward on one worker (verl's link to the global key)
    )
    forward_micro_batch_size: int | None = (
        "${.ppo_micro_batch_size}"  # deprecated global size; use the per-GPU key
    )
    forward_micro_batch_size_per_gpu: int | None = (
        "${.ppo_micro_batch_size_per_gpu}"  # responses per compute_values forward on one worker
    )
    use_dynamic_bsz: bool = "${actor_rollout_ref.actor.use_dynamic_bsz}"  # token-budgeted micro-batches
    ppo_max_token_len_per_gpu: int = 32768  # token budget per training micro-batch with use_dynamic_bsz
    forward_max_token_len_per_gpu: int = "${.ppo_max_token_len_per_gpu}"  # token budget per values forward
    ppo_epochs: int = "${actor_rollout_ref.actor.ppo_epochs}"  # passes over each training batch
    cliprange_value: float = 0.5  # values may move at most this far from the rollout's values (clipped loss)
    grad_clip: float = 1.0  # max global grad norm
    loss_agg_mode: str = "${actor_rollout_ref.actor.loss_agg_mode}"  # aggregation of the value loss


@dataclass
class RewardModelModelConfig(ModelConfig):
    path: str | None = (
        VERL_REWARD_MODEL  # scalar reward model folder (AutoModelForSequenceClassification, num_labels=1)
    )
    input_tokenizer: str | None = (
        "${actor_rollout_ref.model.path}"  # verl re-tokenises with it; here must be null: the reward model reads the actor's ids
    )
    external_lib: str | None = "${actor_rollout_ref.model.external_lib}"  # module imported before loading
    use_remove_padding: bool = False  # pack sequences without padding into one row for forward passes
    enable_gradient_checkpointing: bool = False  # forward only: nothing to recompute
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)  # FSDP2 and offload modes of the reward model


@dataclass
class RewardModelConfig:
    enable: bool = False  # score responses with a reward model (its score replaces the rule reward)
    strategy: str = "fsdp"  # fsdp | fsdp2: both run FSDP2 (fully_shard)
    model: RewardModelModelConfig = field(default_factory=RewardModelModelConfig)
    micro_batch_size: int | None = None  # deprecated global size; use the per-GPU key
    micro_batch_size_per_gpu: int | None = None  # responses per reward-model forward on one worker
    use_dynamic_bsz: bool = "${critic.use_dynamic_bsz}"  # token-budgeted reward-model forwards
    forward_max_token_len_per_gpu: int = (
        "${critic.forward_max_token_len_per_gpu}"  # token budget per reward-model forward
    )
    reward_manager: str = "naive"  # naive (rule scorers by data_source) | dapo (naive + overlong penalty)
    reward_kwargs: dict[str, Any] = field(
        default_factory=dict  # manager's extra args, added with '+'; dapo: max_resp_len, overlong_buffer_cfg.{enable,len,penalty_factor,log}
    )
    timeout: float = 300.0  # seconds the reward function may take to score one batch, then the run stops (verl's limited reward manager reads this key, per sample)


@dataclass
class CustomRewardFunctionConfig:
    path: str | None = None  # python file defining the scorer; null: built-in scorers
    name: str = (
        "compute_score"  # function in that file: (data_source, solution_str, ground_truth, extra_info)
    )


@dataclass
class KLControlConfig:
    type: str = "fixed"  # fixed: constant kl_coef | adaptive: steer the KL towards target_kl
    kl_coef: float = 0.001  # (initial) weight of the KL penalty in the reward
    horizon: int = 10000  # adaptive: responses over which the coefficient adapts
    target_kl: float = 0.1  # adaptive: the KL the coefficient steers towards


@dataclass
class FilterGroupsConfig:
    enable: bool = False  # DAPO dynamic sampling: drop groups whose metric is equal for all responses
    metric: str | None = None  # seq_reward (scores) | seq_final_reward (rewards after KL) | acc | score
    max_num_gen_batches: int = 0  # generation batches allowed per step; <= 0: no limit


@dataclass
class AlgorithmConfig:
    adv_estimator: str = "gae"  # registered advantage estimator (algos/advantages.py); gae trains a critic
    norm_adv_by_std_in_grpo: bool = True  # GRPO: divide by the group's std (False: Dr.GRPO)
    gamma: float = 1.0  # discount factor of GAE (and REINFORCE++ returns)
    lam: float = 1.0  # GAE's lambda: bias/variance trade-off of the advantage
    use_kl_in_reward: bool = False  # subtract kl_coef x KL(actor || ref) from the token-level rewards
    kl_penalty: str = "kl"  # estimator of the in-reward KL: kl | abs | mse | low_var_kl (algos/kl.py)
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)


@dataclass
class TrainerConfig:
    project_name: str = "verl_examples"  # W&B project / output folder name
    experiment_name: str = "gsm8k"  # W&B run name / output folder name
    logger: list[str] = field(
        default_factory=lambda: ["console", "wandb"]
    )  # console, file, wandb, tensorboard
    log_val_generations: int = 0  # validation samples (input, output, score) shown per validation
    rollout_data_dir: str | None = None  # dump each training step's generations to <dir>/<step>.jsonl
    validation_data_dir: str | None = None  # dump each validation's generations to <dir>/<step>.jsonl
    nnodes: int = 1  # nodes of workers
    n_gpus_per_node: int = 8  # workers per node (GPUs, or CPU processes without GPUs)
    total_epochs: int = 30  # passes over the training set
    total_training_steps: int | None = None  # cap on training steps; null: total_epochs' worth
    val_before_train: bool = True  # validate once before the first step
    test_freq: int = -1  # validate every this many steps (and at the end); -1: never
    default_local_dir: str = "checkpoints/${trainer.project_name}/${trainer.experiment_name}"  # metrics.jsonl, checkpoints, trackers
    device: str = "auto"  # auto: cuda where a GPU is visible, else cpu | cpu | cuda
    dist_timeout_s: int = 600  # torch.distributed timeout: a hang becomes an error after this
    auto_offload: bool = False  # apply the memory planner's actor offload and micro-batch at start-up
    device_memory_gb: float | None = None  # auto_offload's budget per device; null: what workers report
    save_freq: int = -1  # save a checkpoint every this many steps and at the last step; -1: never
    resume_mode: str = (
        "auto"  # auto: from default_local_dir's latest checkpoint if any | disable | resume_path
    )
    resume_from_path: str | None = None  # the global_step_N folder resume_mode=resume_path starts from
    max_actor_ckpt_to_keep: int | None = None  # keep only the newest this many actor checkpoints; null: all
    max_critic_ckpt_to_keep: int | None = None  # keep only the newest this many critic checkpoints; null: all
    critic_warmup: int = 0  # training steps that update only the critic before the actor starts updating
    balance_batch: bool = True  # give each worker a balanced share of tokens (mini-batches stay the same)


@dataclass
class RayInitConfig:
    num_cpus: int | None = None  # CPUs for a local Ray; null: all
    address: str | None = None  # join this cluster (also RAY_ADDRESS); null: start a local Ray
    include_dashboard: bool = False  # start Ray's dashboard with a local Ray (needs ray[default])


@dataclass
class RayKwargsConfig:
    ray_init: RayInitConfig = field(default_factory=RayInitConfig)
=======
>>>>>>> main


@dataclass
class PPOTrainerConfig:
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    data: DataConfig = field(default_factory=DataConfig)
    reward_manager: RewardManagerConfig = field(default_factory=RewardManagerConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    global_profiler: GlobalProfilerConfig = field(default_factory=GlobalProfilerConfig)
    transfer_queue: TransferQueueConfig = field(default_factory=TransferQueueConfig)
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)
