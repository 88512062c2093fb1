"""Schema sections of the optional roles: the critic (value model), the reward model, the reward
manager that turns scores into token-level rewards, and the custom reward function.

Defaults are verl's (config/schema.py says how); each field's comment (at the end of its line,
or above a field too long for one) is its documentation in docs/config.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl_lite.config.fields import FOLLOWS_ACTOR, MICRO, POS, POS_INT, follows, key, no_effect, only, refused
from verl_lite.config.freeze import ConfigNode
from verl_lite.config.gates import CUSTOM_REWARD, DYNAMIC, FIXED, REWARD_MODEL
from verl_lite.config.schema_actor import SHUFFLE
from verl_lite.config.schema_engine import (
    FSDP1,
    STRATEGIES,
    CheckpointConfig,
    FSDPConfig,
    OptimConfig,
)
from verl_lite.config.schema_model import CriticModelConfig, RewardModelModelConfig

ACTOR = "actor_rollout_ref.actor"
LEGACY_PROFILER = {
    "tool": "${global_profiler.tool}",
    "enable": False,
    "all_ranks": False,
    "ranks": [],
    "save_path": "${global_profiler.save_path}",
    "tool_config": "${actor_rollout_ref.actor.profiler.tool_config}",
}


@dataclass
class CriticConfig(ConfigNode):
    # the value model's AdamW and LR schedule
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5))
    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    # the critic's own FSDP2 and offload modes (verl 0.9's spelling; verl 0.7's: critic.model.fsdp_config)
    fsdp: FSDPConfig = key(factory=FSDPConfig, older=("critic.model.fsdp_config",))
    # responses per prompt (verl's copy of rollout.n)
    rollout_n: int = key(
        "${actor_rollout_ref.rollout.n}", rule=follows("it is actor_rollout_ref.rollout.n; set that")
    )
    strategy: str = key("fsdp", rule=only(STRATEGIES, FSDP1))  # fsdp | fsdp2: both run FSDP2 (fully_shard)
    enable: bool | None = None  # train a critic; null: when the advantage estimator needs one (gae)
    # prompts per critic optimizer step (global)
    ppo_mini_batch_size: int = key(f"${{{ACTOR}.ppo_mini_batch_size}}", FOLLOWS_ACTOR)
    # deprecated global micro size; use the per-GPU key
    ppo_micro_batch_size: int | None = key(None, MICRO, gate=FIXED)
    # responses per forward/backward on one worker (verl's link to the global key)
    ppo_micro_batch_size_per_gpu: int | None = key("${.ppo_micro_batch_size}", FOLLOWS_ACTOR, gate=FIXED)
    use_dynamic_bsz: bool = f"${{{ACTOR}.use_dynamic_bsz}}"  # token-budgeted micro-batches
    # token budget per training micro-batch with use_dynamic_bsz
    ppo_max_token_len_per_gpu: int = key(32768, POS_INT, gate=DYNAMIC)
    # token budget per values forward
    forward_max_token_len_per_gpu: int = key(
        "${.ppo_max_token_len_per_gpu}", POS_INT.or_null("ppo_max_token_len_per_gpu"), gate=DYNAMIC
    )
    ppo_epochs: int = key(f"${{{ACTOR}.ppo_epochs}}", FOLLOWS_ACTOR)  # passes over each training batch
    # verl's new worker: shuffle before splitting into mini-batches
    shuffle: bool = key(f"${{{ACTOR}.shuffle}}", rule=refused(SHUFFLE))
    # values may move at most this far from the rollout's values (clipped loss)
    cliprange_value: float = key(0.5, POS)
    loss_agg_mode: str = f"${{{ACTOR}.loss_agg_mode}}"  # aggregation of the value loss
    # what the critic's checkpoints hold and what a resume loads (as the actor's)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    # deprecated global size; use the per-GPU key
    forward_micro_batch_size: int | None = key("${.ppo_micro_batch_size}", MICRO, gate=FIXED)
    # responses per compute_values forward on one worker
    forward_micro_batch_size_per_gpu: int | None = key(
        "${.ppo_micro_batch_size_per_gpu}", POS_INT.or_null("ppo_micro_batch_size_per_gpu"), gate=FIXED
    )
    # ranks one sequence is split over (Ulysses sequence parallelism)
    ulysses_sequence_parallel_size: int = key(
        1,
        POS_INT,
        verl09="critic.fsdp.ulysses_sequence_parallel_size",
        older=("critic.model.fsdp_config.ulysses_sequence_parallel_size",),
    )
    # max global grad norm (verl's legacy-worker name); default: optim.clip_grad
    grad_clip: float = key(
        "${.optim.clip_grad}",
        POS,
        deviates="as actor_rollout_ref.actor.grad_clip: follows critic.optim.clip_grad",
    )


@dataclass
class SandboxFusionConfig(ConfigNode):
    # code-execution sandbox the default scorer sends code answers to
    url: str | None = key(None, rule=refused("use custom_reward_function.path for code rewards"))
    max_concurrent: int | None = 64  # requests in flight
    memory_limit_mb: int | None = 1024  # memory per sandboxed run


@dataclass
class RewardModelRolloutConfig(ConfigNode):
    """verl's reward loop: the engine serving the reward model, which verl_lite does not run (its reward
    model is verl's legacy worker): every key accepted, no effect. Its other keys are verl 0.9.1's
    reward.reward_model.rollout.*, added from verl's file at verl's defaults (config/verl_keys.py)."""

    # engine serving the reward model in verl's reward loop (verl: mandatory)
    name: str | None = key(
        None,
        deviates="mandatory (`???`) in verl, where only the reward loop reads it (the engine serving the "
        "reward model); verl_lite scores with verl's legacy reward-model worker, so it is null and has no effect",
    )


@dataclass
class RewardModelConfig(ConfigNode):
    # verl 0.9 moved the reward model's settings under reward.reward_model.* (its own migration,
    # migrate_legacy_reward_impl, is the fact followed by each `verl09` of this section)

    # score responses with a reward model (its score replaces the rule reward)
    enable: bool | None = key(False, verl09="reward.reward_model.enable")
    # run the reward model on its own GPUs
    enable_resource_pool: bool | None = key(
        False,
        verl09="reward.reward_model.enable_resource_pool",
        gate=REWARD_MODEL,
        rule=refused("the reward model shares the actor's workers"),
    )
    # GPUs per node of that pool
    n_gpus_per_node: int | None = key(
        8, verl09="reward.reward_model.n_gpus_per_node", gate=REWARD_MODEL, rule=no_effect()
    )
    # nodes of that pool
    nnodes: int | None = key(0, verl09="reward.reward_model.nnodes", gate=REWARD_MODEL, rule=no_effect())
    # fsdp | fsdp2: both run FSDP2 (fully_shard)
    strategy: str | None = key("fsdp", gate=REWARD_MODEL, rule=only(STRATEGIES, FSDP1))
    model: RewardModelModelConfig = key(factory=RewardModelModelConfig, gate=REWARD_MODEL)
    # deprecated global size; use the per-GPU key
    micro_batch_size: int | None = key(None, MICRO, gate=(REWARD_MODEL, FIXED))
    # responses per reward-model forward on one worker
    micro_batch_size_per_gpu: int | None = key(None, MICRO, gate=(REWARD_MODEL, FIXED))
    # longest input the reward model reads; null: no limit
    max_length: int | None = key(
        None, gate=REWARD_MODEL, rule=refused("responses are scored whole; shorten data.max_response_length")
    )
    # token-budgeted reward-model forwards
    use_dynamic_bsz: bool | None = key("${critic.use_dynamic_bsz}", gate=REWARD_MODEL)
    # token budget per reward-model forward
    forward_max_token_len_per_gpu: int | None = key(
        "${critic.forward_max_token_len_per_gpu}", POS_INT, gate=(REWARD_MODEL, DYNAMIC)
    )
    # naive (rule scorers by data_source) | dapo (naive + overlong penalty) | gdpo (naive + experiment_name) | batch (one call per batch, with lists) | prime (rows in processes, a failure scored 0)
    reward_manager: str | None = "naive"
    # compute rule rewards in the background, overlapping the next phases
    launch_reward_fn_async: bool | None = key(
        False, rule=no_effect("rewards are computed in order here (the same rewards)")
    )
    sandbox_fusion: SandboxFusionConfig = key(
        factory=SandboxFusionConfig,
        verl09="reward.sandbox_fusion",
        older=("sandbox_fusion",),
        rule=no_effect(),
    )
    # verl 0.7's legacy reward-model profiler (verl 0.9.1 dropped it; no profiler runs here: support.py)
    profiler: dict[str, Any] = key(
        factory=lambda: dict(LEGACY_PROFILER),
        rule=no_effect("verl_lite has no profiler integration: nothing is recorded"),
    )
    # ranks one sequence is split over (Ulysses sequence parallelism)
    ulysses_sequence_parallel_size: int | None = key(
        1, gate=REWARD_MODEL, rule=refused("the reward model runs without sequence parallelism; keep 1")
    )
    # verl: rewards in reward-loop workers (with a reward model: see support.py)
    use_reward_loop: bool | None = key(
        True,
        gate=REWARD_MODEL,
        rule=only(
            (False,),
            "verl's reward loop re-templates the reward model's input and serves the model with vLLM; verl_lite runs verl's legacy reward-model worker (FSDP): set reward_model.use_reward_loop=False",
        ),
    )
    # reward-loop workers
    num_workers: int | None = key(8, verl09="reward.num_workers", gate=REWARD_MODEL, rule=no_effect())
    rollout: RewardModelRolloutConfig = key(
        factory=RewardModelRolloutConfig,
        verl09="reward.reward_model.rollout",
        gate=REWARD_MODEL,
        rule=no_effect(),
    )
    # manager's extra args, added with '+'; dapo: max_resp_len, overlong_buffer_cfg.{enable,len,penalty_factor,log}
    reward_kwargs: dict[str, Any] = key(
        factory=dict,
        verl09="reward.reward_kwargs",
    )
    # seconds the reward function may take to score one batch, then the run stops (verl's limited reward manager reads this key, per sample)
    timeout: float = key(300.0, POS)


@dataclass
class ModuleConfig(ConfigNode):
    # file defining a custom reward manager (source=importlib)
    path: str | None = key(
        None, verl09="reward.reward_manager.module.path", older=("reward_model.reward_loop_module_path",)
    )
    # its class
    name: str | None = key(
        "custom_reward_manager",
        verl09="reward.reward_manager.module.name",
        older=("reward_model.reward_loop_class_name",),
    )


@dataclass
class RewardManagerConfig(ConfigNode):
    # register: a manager registered by name | importlib: a class from module.path
    source: str = key(
        "register",
        verl09="reward.reward_manager.source",
        older=("reward_model.reward_loop_source",),
        rule=only(
            ("register",), "register a manager in verl_lite/reward/managers.py, or use custom_reward_function"
        ),
    )
    # the reward manager: naive | dapo | gdpo | batch | prime
    name: str | None = key(
        "${reward_model.reward_manager}",
        verl09="reward.reward_manager.name",
        older=("reward_model.reward_manager",),
    )
    module: ModuleConfig = key(factory=ModuleConfig, rule=no_effect())


@dataclass
class CustomRewardFunctionConfig(ConfigNode):
    path: str | None = None  # python file defining the scorer; null: built-in scorers
    # function in that file: (data_source, solution_str, ground_truth, extra_info)
    name: str | None = key("compute_score", gate=CUSTOM_REWARD)
    # keywords added to every call, winning over verl's own (verl reads it with .get; add with '+')
    reward_kwargs: dict[str, Any] = field(default_factory=dict)
