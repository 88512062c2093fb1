"""The typed config schema: every key, its default and its meaning, in one place.

Keys, meanings and defaults are verl's composed ppo_trainer config (verl commit
b178a3cd56f58b2d502255daba591e92833930a7), so a verl command line means here what it means in verl.
verl's links between keys are kept as OmegaConf interpolations in the defaults (`${...}`): the
rollout's lengths follow data's, the ref's and rollout's log-prob batching follow the actor's, the
critic follows the actor, ... The few deliberate deviations are listed in docs/config.md with their
reasons. The embedded tiny CPU demo is a named config on top of this one (conf/demo.yaml).

Hydra composes conf/ppo_trainer.yaml on top of this schema (config/compose.py), so an unknown key
is an error. A `verl_lite://` path names an embedded asset that is built on first use
(data/assets.py). The comment after each field is its documentation (docs/config.md is generated
from it). A schema dataclass built directly in Python keeps its `${...}` defaults as strings: build
configs through compose (or resolve them with OmegaConf) wherever a linked key is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TINY_MODEL = "verl_lite://tiny-qwen2-arith"
TINY_TRAIN = "verl_lite://arith/train.parquet"
TINY_VAL = "verl_lite://arith/test.parquet"

# verl's placeholder paths: defaults a real run must replace (main_ppo names them when missing)
VERL_MODEL = "~/models/deepseek-llm-7b-chat"
VERL_REWARD_MODEL = "~/models/FsfairX-LLaMA3-RM-v0.1"
VERL_TRAIN = "~/data/rlhf/gsm8k/train.parquet"
VERL_VAL = "~/data/rlhf/gsm8k/test.parquet"


@dataclass
class DataConfig:
    tokenizer: str | None = None  # tokenizer folder; null: the actor model's
    train_files: Any = VERL_TRAIN  # parquet file or list of files, verl's RLHF layout
    val_files: Any = VERL_VAL  # parquet file or list of files for validation
    prompt_key: str = "prompt"  # column holding the chat messages
    reward_fn_key: str = "data_source"  # column that picks the reward scorer
    max_prompt_length: int = 512  # prompt tokens after the chat template (left-padded to this)
    max_response_length: int = 512  # generated tokens per response
    train_batch_size: int = 1024  # prompts per training step (global)
    val_batch_size: int | None = None  # prompts per validation batch; null: the whole validation set
    return_raw_chat: bool = True  # keep the raw messages in the batch
    shuffle: bool = True  # shuffle the training set every epoch
    seed: int | None = None  # seed of the shuffling; null: a fixed default seed
    truncation: str = "error"  # prompt over max_prompt_length: error | left | right
    filter_overlong_prompts: bool = False  # drop prompts over max_prompt_length at load (counted, logged)
    trust_remote_code: bool = False  # passed to the tokenizer loader


@dataclass
class ModelConfig:
    path: str = VERL_MODEL  # local HF causal-LM folder (config, weights, tokenizer)
    override_config: dict[str, Any] = field(default_factory=dict)  # HF config fields to override
    enable_gradient_checkpointing: bool = True  # recompute activations in backward
    trust_remote_code: bool = False  # passed to the model loader
    external_lib: str | None = None  # module imported before loading (registers custom models)
    use_remove_padding: bool = True  # pack sequences without padding into one row for forward passes
    lora_rank: int = 0  # > 0: train LoRA adapters of this rank on the frozen model; 0: full tuning
    lora_alpha: int = 16  # LoRA scaling: the adapter's update is multiplied by lora_alpha / lora_rank
    target_modules: Any = "all-linear"  # adapted modules: all-linear (all but the output head) or a list
    exclude_modules: Any = None  # modules never adapted (a list of names or a regex); null: none
    lora_adapter_path: str | None = None  # continue training this saved PEFT adapter (rank, targets)


@dataclass
class WrapPolicyConfig:
    min_num_params: int = 0  # 0: one fully_shard per decoder layer; >0: per submodule this large


@dataclass
class MixedPrecisionConfig:
    param_dtype: str = (
        "bf16"  # dtype params are gathered in for forward/backward (fp32 on CPUs: bf16 is slow there)
    )
    reduce_dtype: str = "fp32"  # dtype gradients are reduce-scattered in
    buffer_dtype: str = "fp32"  # dtype of module buffers (rotary tables stay fp32 unless set)


@dataclass
class FSDPConfig:
    param_offload: bool = False  # sharded params on the host between phases, back on the device inside them
    optimizer_offload: bool = False  # optimizer state on the host except during the optimizer step
    offload_policy: bool = (
        False  # FSDP2 CPUOffloadPolicy: params, grads, optimizer on the host, step on the host
    )
    gradient_offload: bool = False  # grads on the host; FSDP2 offers it only with offload_policy=True
    reshard_after_forward: bool = (
        True  # free gathered params after forward, gather again in backward (ZeRO-3)
    )
    forward_prefetch: bool = (
        False  # explicitly prefetch the next layer's all-gather (and the previous in backward)
    )
    reduce_scatter_every_micro_batch: bool = (
        True  # False: keep unsharded grads until the last micro-batch, reduce once
    )
    wrap_policy: WrapPolicyConfig = field(default_factory=WrapPolicyConfig)
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)
    model_dtype: str = "fp32"  # dtype the sharded (master) params are kept in
    use_orig_params: bool = False  # FSDP1 key: accepted; FSDP2 always keeps the original parameters
    limit_all_gathers: bool | None = None  # FSDP1 key: accepted; FSDP2 bounds in-flight all-gathers itself


@dataclass
class OptimConfig:
    lr: float = 1e-6  # AdamW learning rate
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # AdamW betas
    weight_decay: float = 0.01  # AdamW decoupled weight decay
    lr_warmup_steps: int = -1  # warm-up training steps; -1: use lr_warmup_steps_ratio
    lr_warmup_steps_ratio: float = 0.0  # warm-up as a fraction of all training steps
    lr_scheduler_type: str = "constant"  # schedule after warm-up: constant | cosine
    warmup_style: str | None = None  # verl's deprecated name of lr_scheduler_type; set: it wins
    min_lr_ratio: float = 0.0  # cosine floor as a fraction of lr
    num_cycles: float = 0.5  # cosine cycles over the run
    total_training_steps: int = -1  # filled in by the trainer: training steps of the whole run


@dataclass
class CheckpointConfig:
    save_contents: list[str] = field(
        default_factory=lambda: [
            "model",
            "optimizer",
            "extra",
        ]  # what a checkpoint holds: model | optimizer | extra (lr schedule, RNG, rollout state) | hf_model (full weights, safetensors)
    )
    load_contents: list[str] = "${.save_contents}"  # what a resume restores (model, optimizer, extra)


@dataclass
class PolicyLossConfig:
    loss_mode: str = "vanilla"  # registered policy loss (algos/policy_loss.py): vanilla | gspo


@dataclass
class ActorConfig:
    strategy: str = "fsdp"  # fsdp | fsdp2: both run FSDP2 (fully_shard)
    ppo_mini_batch_size: int = 256  # prompts per optimizer step (global; x rollout.n responses)
    ppo_micro_batch_size: int | None = None  # deprecated global micro size; use the per-GPU key
    ppo_micro_batch_size_per_gpu: int | None = None  # responses per forward/backward on one worker
    use_dynamic_bsz: bool = False  # token-budgeted micro-batches (ppo_max_token_len_per_gpu)
    ppo_max_token_len_per_gpu: int = 16384  # token budget per micro-batch with use_dynamic_bsz
    ppo_epochs: int = 1  # passes over each training batch
    shuffle: bool = False  # shuffle responses before splitting into mini-batches
    clip_ratio: float = 0.2  # PPO clip range (both sides unless low/high are set)
    clip_ratio_low: float | None = 0.2  # lower clip range; null: clip_ratio
    clip_ratio_high: float | None = 0.2  # upper clip range; null: clip_ratio
    clip_ratio_c: float = 3.0  # dual-clip cap (> 1) on the ratio for negative advantages
    loss_agg_mode: str = (
        "token-mean"  # token-mean | seq-mean-token-sum | seq-mean-token-mean | seq-mean-token-sum-norm
    )
    entropy_coeff: float = 0.0  # entropy bonus weight
    use_kl_loss: bool = False  # add KL(actor || ref) to the loss (GRPO style)
    kl_loss_coef: float = 0.001  # weight of the KL loss
    kl_loss_type: str = "low_var_kl"  # kl | abs | mse | low_var_kl (k1 | k2 | k3); '+': k2's gradient
    grad_clip: float = 1.0  # max global grad norm
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)


@dataclass
class RefConfig:
    log_prob_micro_batch_size: int | None = None  # deprecated global size; use the per-GPU key
    log_prob_micro_batch_size_per_gpu: int | None = None  # responses per ref forward on one worker
    log_prob_use_dynamic_bsz: bool = (
        "${actor_rollout_ref.actor.use_dynamic_bsz}"  # token-budgeted ref forwards
    )
    log_prob_max_token_len_per_gpu: int = (
        "${actor_rollout_ref.actor.ppo_max_token_len_per_gpu}"  # token budget per ref forward
    )
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


@dataclass
class SamplingKwargs:
    temperature: float = 0.0  # 0: greedy
    top_k: int = -1  # -1: no top-k
    top_p: float = 1.0  # nucleus sampling mass (1.0: off)
    n: int = 1  # samples per prompt
    do_sample: bool = False  # False: greedy validation


@dataclass
class RolloutConfig:
    name: str = "auto"  # rollout backend: vllm | hf (transformers generate, the reference); auto: vllm where it is installed, else hf
    mode: str = "async"  # async (verl's server mode) | sync: both run the hybrid engine, generation and training taking turns
    temperature: float = 1.0  # sampling temperature of training rollouts
    top_k: int = -1  # -1: no top-k
    top_p: float = 1.0  # nucleus sampling mass (1.0: off)
    do_sample: bool = True  # False: greedy decoding for training rollouts
    n: int = 1  # responses per prompt
    prompt_length: int = "${data.max_prompt_length}"  # prompt tokens the rollout takes (left-padded)
    response_length: int = "${data.max_response_length}"  # most tokens generated per response
    ignore_eos: bool = False  # keep generating past EOS up to response_length
    seed: int = 0  # seed of the rollout's own sampling generator (per rank and call)
    dtype: str = "bfloat16"  # dtype of the rollout copy of the weights
    log_prob_micro_batch_size: int | None = None  # deprecated global size; use the per-GPU key
    log_prob_micro_batch_size_per_gpu: int | None = None  # responses per old-log-prob forward
    log_prob_use_dynamic_bsz: bool = (
        "${actor_rollout_ref.actor.use_dynamic_bsz}"  # token-budgeted old-log-prob forwards
    )
    log_prob_max_token_len_per_gpu: int = (
        "${actor_rollout_ref.actor.ppo_max_token_len_per_gpu}"  # token budget per old-log-prob forward
    )
    val_kwargs: SamplingKwargs = field(default_factory=SamplingKwargs)
    # vLLM engine (name=vllm); keys and meanings as verl's, see docs/hybrid_engine.md
    gpu_memory_utilization: float = 0.5  # share of the GPU vLLM may use for weights and KV cache
    enforce_eager: bool = (
        False  # no CUDA graphs / torch.compile; on CPU False means an inductor compile at start
    )
    free_cache_engine: bool = (
        True  # GPU: sleep the engine after generation (weights to host, KV cache freed); no-op on CPU
    )
    tensor_model_parallel_size: int = 2  # ranks per vLLM engine (TP), must divide the world; the hf rollout has no TP: each worker generates alone
    max_num_batched_tokens: int = 8192  # tokens per vLLM scheduler step
    max_model_len: int | None = None  # longest prompt + response; null: prompt_length + response_length
    max_num_seqs: int = 256  # sequences vLLM runs at once
    enable_chunked_prefill: bool = True  # split long prefills across scheduler steps
    enable_prefix_caching: bool = True  # reuse KV of shared prompt prefixes (reset at every weight sync)
    disable_log_stats: bool = True  # no vLLM throughput logging
    load_format: str = "dummy"  # dummy: vLLM starts without weights (the first sync brings them) | auto | safetensors: reads model.path
    layered_summon: bool = False  # LoRA: gather adapters a layer at a time; needs load_format != dummy
    update_weights_bucket_megabytes: int = (
        512  # weight sync: full tensors gathered per bucket before vLLM loads them
    )
    cpu_kv_cache_gb: float = (
        1.0  # CPU only: host memory (GiB) per rank for vLLM's KV cache; VLLM_CPU_KVCACHE_SPACE wins
    )


@dataclass
class ActorRolloutRefConfig:
    hybrid_engine: bool = True  # actor and rollout share each worker (the only mode)
    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)


@dataclass
class CriticModelConfig(ModelConfig):
    path: str = VERL_MODEL  # value model folder (its LM backbone + a new scalar head)
    tokenizer_path: str | None = (
        "${actor_rollout_ref.model.path}"  # tokenizer folder (must give the actor's ids); null: the critic model's
    )
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


@dataclass
class PPOTrainerConfig:
    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)
