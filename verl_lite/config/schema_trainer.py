"""Schema sections of the run: data, algorithm, trainer, Ray.

Defaults are verl's (config/schema.py says how); each field's comment (at the end of its line,
or above a field too long for one) is its documentation in docs/config.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl_lite.config.fields import (
    FREQ,
    INT_LIMIT,
    MAX_SAMPLES,
    NON_NEG,
    NON_NEG_INT,
    POS,
    POS_INT,
    UNIT,
    Domain,
    choice,
    key,
    no_effect,
    only,
    refused,
)
from verl_lite.config.freeze import ConfigNode
from verl_lite.config.gates import (
    BYPASS,
    COLOCATE,
    DAPO,
    KL_IN_REWARD,
    ROLLOUT_CORRECTION,
    SEPARATE,
    V1,
    V1_ASYNC,
    V1_SYNC,
)
from verl_lite.config.schema_actor import KL_TYPES, is_kl_type

# verl's placeholder data paths: defaults a real run must replace (start-up names them when missing)
VERL_TRAIN = "~/data/rlhf/gsm8k/train.parquet"
VERL_VAL = "~/data/rlhf/gsm8k/test.parquet"
TRUNCATIONS = ("error", "left", "right")
KL_CTRL_TYPES = ("fixed", "adaptive")
# DAPO's group metric: verl 0.9.1's "reward" (the pre-KL reward), the DAPO recipe's seq_* names, or any
# key of the reward function's extra info (trainer/dynamic_sampling.py)
FILTER_METRIC = Domain(
    lambda v: isinstance(v, str) and v != "",
    "a metric name: reward, seq_reward, seq_final_reward, or a key your reward function returns "
    "(needed with algorithm.filter_groups.enable=True)",
)
BYPASS_LOSS_TYPES = ("ppo_clip", "reinforce")
OFF_POLICY_STRATEGIES = ("drop", "wait")  # verl 0.9's replay buffer (trainer.v1.sampler)
TRAINER_MODES = (
    "sync",
    "colocate_async",
    "separate_async",
)  # verl 0.9's V1 trainer (trainer.v1.trainer_mode)


@dataclass
class ClassRefConfig(ConfigNode):
    path: str | None = None  # python file
    name: str | None = None  # name defined in it


@dataclass
class SamplerConfig(ConfigNode):
    class_path: str | None = None  # python file of a custom (curriculum) sampler
    class_name: str | None = None  # its class


@dataclass
class DataConfig(ConfigNode):
    # tokenizer folder; null: the actor model's (model.tokenizer_path, else model.path)
    tokenizer: str | None = None
    # copy the data files to /dev/shm before reading them
    use_shm: bool | None = key(
        False, rule=no_effect("the driver reads the data files once; /dev/shm changes nothing")
    )
    train_files: Any = VERL_TRAIN  # parquet file or list of files, verl's RLHF layout
    val_files: Any = VERL_VAL  # parquet file or list of files for validation
    # use only the first this many training rows; -1: all
    train_max_samples: int | None = key(-1, MAX_SAMPLES)
    # use only the first this many validation rows; -1: all
    val_max_samples: int | None = key(-1, MAX_SAMPLES)
    prompt_key: str | None = "prompt"  # column holding the chat messages
    reward_fn_key: str | None = "data_source"  # column that picks the reward scorer
    # prompt tokens after the chat template (left-padded to this)
    max_prompt_length: int | None = key(512, POS_INT)
    max_response_length: int | None = key(512, POS_INT)  # generated tokens per response
    train_batch_size: int | None = key(1024, POS_INT)  # prompts per training step (global)
    # prompts per validation batch; null: the whole validation set
    val_batch_size: int | None = key(None, POS_INT.or_null("the whole validation set in one batch"))
    # tools listed in the prompts (the chat template's `tools`)
    tool_config_path: str | None = "${actor_rollout_ref.rollout.multi_turn.tool_config_path}"
    return_raw_chat: bool | None = True  # keep the raw messages in the batch
    shuffle: bool | None = True  # shuffle the training set every epoch
    # seed of the shuffling; null: a fixed default seed
    seed: int | None = key(None, NON_NEG_INT.or_null("a fixed default seed"))
    # drop prompts over max_prompt_length at load (counted, logged)
    filter_overlong_prompts: bool | None = False
    # prompt over max_prompt_length: error | left | right
    truncation: str | None = key("error", choice(TRUNCATIONS))
    trust_remote_code: bool | None = False  # passed to the tokenizer loader
    sampler: SamplerConfig = key(
        factory=SamplerConfig, rule=refused("the sampler shuffles by data.seed (data.shuffle)")
    )
    # a dynamic data generator
    datagen: ClassRefConfig = key(
        factory=ClassRefConfig, rule=refused("datasets are verl's RLHF parquet layout (data.train_files)")
    )
    # extra arguments of apply_chat_template
    apply_chat_template_kwargs: dict[str, Any] | None = field(default_factory=dict)
    # DAPO dynamic sampling: prompts per generation batch; null: train_batch_size
    gen_batch_size: int | None = key(None, POS_INT.or_null("data.train_batch_size"))


@dataclass
class KLControlConfig(ConfigNode):
    # fixed: constant kl_coef | adaptive: steer the KL towards target_kl
    type: str = key("fixed", choice(KL_CTRL_TYPES))
    kl_coef: float = key(0.001, NON_NEG)  # (initial) weight of the KL penalty in the reward
    horizon: int = 10000  # adaptive: responses over which the coefficient adapts
    target_kl: float = 0.1  # adaptive: the KL the coefficient steers towards


@dataclass
class FilterGroupsConfig(ConfigNode):
    enable: bool = False  # DAPO dynamic sampling: drop groups whose metric is equal for all responses
    # reward (verl 0.9.1: the pre-KL score) | seq_reward | seq_final_reward | a key the reward function returns (acc, score, ...)
    metric: str | None = key("reward", FILTER_METRIC)
    max_num_gen_batches: int = key(0, INT_LIMIT)  # generation batches allowed per step; <= 0: no limit


@dataclass
class RolloutCorrectionConfig(ConfigNode):
    # truncated importance weights pi_train / pi_rollout: token | sequence (algos/rollout_corr.py)
    rollout_is: str | None = None
    rollout_is_threshold: float | None = 2.0  # upper truncation of those weights
    # rejection: comma-separated token_k1..3, seq_sum_k1..3, seq_mean_k1..3, seq_max_k2..3 (algos/rollout_rs.py)
    rollout_rs: str | None = None
    # rejection bounds: one for all options or one per option; k1: "lower_upper" or an upper bound
    rollout_rs_threshold: Any = None
    # the rollout's log-probs as the old policy's: no old-log-prob pass (algos/policy_loss_bypass.py)
    bypass_mode: bool | None = False
    # bypass mode's loss: ppo_clip | reinforce
    loss_type: str | None = key("ppo_clip", choice(BYPASS_LOSS_TYPES, "(bypass mode's loss)"), gate=BYPASS)
    rollout_is_batch_normalize: bool | None = False  # normalise the weights to mean 1 over the batch


@dataclass
class AlgorithmConfig(ConfigNode):
    # null (verl's way to turn the section off) reads as the defaults, every option off (config/spellings.py)
    rollout_correction: RolloutCorrectionConfig | None = key(
        factory=RolloutCorrectionConfig, gate=ROLLOUT_CORRECTION
    )
    gamma: float = key(1.0, UNIT)  # discount factor of GAE (and REINFORCE++ returns)
    lam: float = key(1.0, UNIT)  # GAE's lambda: bias/variance trade-off of the advantage
    adv_estimator: str = "gae"  # advantage estimator (docs/algorithms.md); gae trains a critic
    norm_adv_by_std_in_grpo: bool = True  # GRPO: divide by the group's std (False: Dr.GRPO)
    # gdpo: the reward components compute_score returns (its dict's keys)
    gdpo_reward_keys: list[str] | None = None
    gdpo_reward_weights: list[float] | None = None  # gdpo: one weight per component; null: 1 each
    use_kl_in_reward: bool = False  # subtract kl_coef x KL(actor || ref) from the token-level rewards
    # estimator of the in-reward KL: kl | abs | mse | low_var_kl (algos/kl.py)
    kl_penalty: str = key("kl", choice(KL_TYPES, test=is_kl_type), gate=KL_IN_REWARD)
    kl_ctrl: KLControlConfig = key(factory=KLControlConfig, gate=KL_IN_REWARD)
    filter_groups: FilterGroupsConfig = key(factory=FilterGroupsConfig, gate=DAPO)  # verl's DAPO recipe keys


@dataclass
class ColocateAsyncConfig(ConfigNode):
    # prompt batches in flight beyond the step's own (generation starts ahead of training)
    num_warmup_batches: int = key(1, NON_NEG_INT)


@dataclass
class SeparateAsyncConfig(ConfigNode):
    num_warmup_batches: int = key(1, NON_NEG_INT)  # batches generated before training starts
    # local updates (mini-batches) per step, between weight syncs to the rollout group
    parameter_sync_step: int = key(4, POS_INT)


@dataclass
class V1SamplerConfig(ConfigNode):
    """verl 0.9's replay buffer: which prompt groups the V1 trainer takes, and when a group is too stale."""

    # model versions from a prompt's submission to its training before the strategy applies
    max_off_policy_threshold: int = key(8, POS_INT, gate=V1_ASYNC)
    # drop: evict and refill a finished group past the threshold | wait: finish in-flight groups at it first
    max_off_policy_strategy: str = key("drop", choice(OFF_POLICY_STRATEGIES), gate=V1_ASYNC)
    # verl's sync sampling: replace a group whose trajectories all failed with a new prompt
    sync_refill_failed_groups: bool = key(
        False,
        gate=V1_SYNC,
        rule=only(
            (False,),
            "verl_lite's sync trainer does not refill a group whose agent loops failed (under colocate_async "
            "and separate_async a failed group is always evicted and refilled, as in verl's async modes)",
        ),
    )


@dataclass
class V1Config(ConfigNode):
    """verl 0.9's V1 trainer (trainer.use_v1): its mode, and the async modes' and replay buffer's settings."""

    # sync: generate, then train, each step (verl_lite's trainer) | colocate_async | separate_async
    trainer_mode: str = key("sync", choice(TRAINER_MODES))
    # sync mode's settings (verl has none yet)
    sync: dict[str, Any] = key(
        factory=dict, rule=refused("verl 0.9's sync mode has no settings; leave it {}")
    )
    colocate_async: ColocateAsyncConfig = key(factory=ColocateAsyncConfig, gate=COLOCATE)
    separate_async: SeparateAsyncConfig = key(factory=SeparateAsyncConfig, gate=SEPARATE)
    sampler: V1SamplerConfig = field(default_factory=V1SamplerConfig)


@dataclass
class TrainerConfig(ConfigNode):
    # give each worker a balanced share of tokens (mini-batches stay the same)
    balance_batch: bool | None = True
    total_epochs: int | None = key(30, POS_INT)  # passes over the training set
    # cap on training steps; null: total_epochs' worth
    total_training_steps: int | None = key(None, POS_INT.or_null("total_epochs' worth"))
    project_name: str | None = "verl_examples"  # W&B project / output folder name
    experiment_name: str | None = "gsm8k"  # W&B run name / output folder name
    # console, file, wandb, tensorboard: a list, or one name
    logger: Any = field(default_factory=lambda: ["console", "wandb"])
    # validation samples (input, output, score) shown per validation
    log_val_generations: int | None = key(0, NON_NEG_INT)
    rollout_data_dir: str | None = None  # dump each training step's generations to <dir>/<step>.jsonl
    validation_data_dir: str | None = None  # dump each validation's generations to <dir>/<step>.jsonl
    nnodes: int | None = key(1, POS_INT)  # nodes of workers
    n_gpus_per_node: int | None = key(8, POS_INT)  # workers per node (GPUs, or CPU processes without GPUs)
    # save a checkpoint every this many steps and at the last step; -1: never
    save_freq: int | None = key(-1, FREQ)
    # auto: from default_local_dir's latest checkpoint if any | disable | resume_path
    resume_mode: str | None = "auto"
    resume_from_path: str | None = None  # the global_step_N folder resume_mode=resume_path starts from
    val_before_train: bool | None = True  # validate once before the first step
    val_only: bool | None = False  # with val_before_train: validate once, then stop
    test_freq: int | None = key(-1, FREQ)  # validate every this many steps (and at the end); -1: never
    # training steps that update only the critic before the actor starts updating
    critic_warmup: int | None = key(0, NON_NEG_INT)
    # verl deletes only the local copy of a checkpoint it fetched from remote storage (HDFS) after
    # loading it; a local checkpoint (all verl_lite resumes from) is kept: True logs that it was kept
    del_local_ckpt_after_load: bool | None = False
    # metrics.jsonl, checkpoints, trackers
    default_local_dir: str | None = "checkpoints/${trainer.project_name}/${trainer.experiment_name}"
    # keep only the newest this many actor checkpoints of those this run saved (verl); null: all
    max_actor_ckpt_to_keep: int | None = key(None, POS_INT.or_null("keep all"))
    # keep only the newest this many critic checkpoints of those this run saved (verl); null: all
    max_critic_ckpt_to_keep: int | None = key(None, POS_INT.or_null("keep all"))
    # auto: cuda where a GPU is visible, else cpu | cpu | cuda
    device: str | None = key(
        "auto",
        deviates="verl's default is cuda; `auto` uses cuda where a GPU is visible and cpu (gloo) otherwise, "
        "so a command runs unchanged on a CPU-only machine",
    )
    # verl's choice of worker implementation: auto | enable | disable
    use_legacy_worker_impl: str | None = key(
        "auto",
        rule=only(
            ("auto", "enable", "disable"),
            "auto, enable or disable",
            note="verl_lite has one worker implementation",
        ),
    )
    # verl 0.9's V1 trainer (its default); False: verl's legacy trainer (the same PPO step)
    use_v1: bool | None = key(
        True,
        rule=no_effect(
            "verl_lite's sync trainer is verl 0.9's V1 sync trainer and its legacy one alike (the same PPO step); only trainer.v1.trainer_mode=colocate_async|separate_async changes the schedule, and only with use_v1"
        ),
    )
    v1: V1Config = key(factory=V1Config, gate=V1)
    # verl_lite's own keys

    # torch.distributed timeout: a hang becomes an error after this
    dist_timeout_s: int | None = key("${actor_rollout_ref.nccl_timeout}", POS_INT)
    auto_offload: bool = False  # apply the memory planner's actor offload and micro-batch at start-up
    # auto_offload's budget per device; null: what the devices report
    device_memory_gb: float | None = key(None, POS.or_null("what the workers report"))
    # also show every metric on the console every this many steps; -1: only at validation and the last step
    console_full_freq: int | None = key(-1, FREQ)
    resume_without_manifest: bool = False  # resume from a checkpoint that has no manifest.json (saved before manifests, or copied without it), its files unverified


@dataclass
class RayInitConfig(ConfigNode):
    # CPUs for a local Ray; null: all
    num_cpus: int | None = key(None, POS_INT.or_null("all of the machine's"))
    # the run's Ray runtime_env, local Ray or cluster, fields as Ray names them (env_vars: str values; they win over verl_lite's); py_executable as in verl 0.9 (its uv launcher's interpreter); a null field is Ray's default
    runtime_env: dict[str, Any] = field(default_factory=lambda: {"py_executable": None})
    address: str | None = None  # join this cluster (also RAY_ADDRESS); null: start a local Ray
    include_dashboard: bool = False  # start Ray's dashboard with a local Ray (needs ray[default])


@dataclass
class RayKwargsConfig(ConfigNode):
    ray_init: RayInitConfig = field(default_factory=RayInitConfig)
    timeline_json_file: str | None = None  # write Ray's task timeline (chrome://tracing) here at the end
