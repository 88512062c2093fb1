"""Start-up normalisation and validation: every problem named by its key, its value and the fix.

`normalize` fills derived values the way verl does (rollout lengths from data.*, clip bounds from
clip_ratio, per-GPU micro sizes from deprecated global ones). `validate` collects every problem it
finds and raises them together, before Ray or any worker starts.
"""

from __future__ import annotations

import json
import logging
import os

from verl_lite.algos import ADV_ESTIMATORS, POLICY_LOSSES
from verl_lite.algos.kl import KL_TYPES, is_kl_type
from verl_lite.algos.loss_agg import LOSS_AGG_MODES
from verl_lite.algos.policy_loss import GSPO_CLIP_RATIO_HIGH, GSPO_CLIP_RATIO_LOW
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.data.rlhf_dataset import TRUNCATIONS
from verl_lite.engine.checkpoint import CONTENTS
from verl_lite.engine.optim import WARMUP_STYLES
from verl_lite.engine.parallelize import DTYPES
from verl_lite.reward.managers import REWARD_MANAGERS
from verl_lite.rollout import ROLLOUT_NAMES, resolve_rollout_name, vllm_available
from verl_lite.trainer.tracking import BACKENDS

log = logging.getLogger(__name__)
ARR = "actor_rollout_ref"


class ConfigError(ValueError):
    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid config:\n  - " + "\n  - ".join(problems))


def world_size(cfg: PPOTrainerConfig) -> int:
    return cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node


def _per_gpu(global_size, per_gpu, world: int, key: str, problems: list[str]):
    """verl's rule: a deprecated global micro size becomes a per-GPU one; not both."""
    if global_size is None:
        return per_gpu
    if per_gpu is not None:
        problems.append(f"{key} and {key}_per_gpu are both set; keep only {key}_per_gpu")
        return per_gpu
    if global_size % world:
        problems.append(
            f"{key}={global_size} is not divisible by the {world} workers; set {key}_per_gpu instead"
        )
        return per_gpu
    return global_size // world


def _clip_bounds(a) -> tuple[float, float]:
    """Unset bounds: clip_ratio, or for gspo the GSPO paper's (a sequence ratio barely moves)."""
    if a.policy_loss.loss_mode == "gspo":
        low, high = GSPO_CLIP_RATIO_LOW, GSPO_CLIP_RATIO_HIGH
        if a.clip_ratio_low is None or a.clip_ratio_high is None:
            log.info("policy_loss.loss_mode=gspo: unset clip_ratio_low/high default to %s/%s", low, high)
    else:
        low = high = a.clip_ratio
    return (
        low if a.clip_ratio_low is None else a.clip_ratio_low,
        high if a.clip_ratio_high is None else a.clip_ratio_high,
    )


def normalize(cfg: PPOTrainerConfig) -> list[str]:
    problems: list[str] = []
    arr, world = cfg.actor_rollout_ref, world_size(cfg)
    arr.rollout.prompt_length = arr.rollout.prompt_length or cfg.data.max_prompt_length
    arr.rollout.response_length = arr.rollout.response_length or cfg.data.max_response_length
    _normalize_rollout(arr.rollout)
    a = arr.actor
    a.clip_ratio_low, a.clip_ratio_high = _clip_bounds(a)
    a.ppo_micro_batch_size_per_gpu = _per_gpu(
        a.ppo_micro_batch_size,
        a.ppo_micro_batch_size_per_gpu,
        world,
        f"{ARR}.actor.ppo_micro_batch_size",
        problems,
    )
    for section in ("rollout", "ref"):
        sub = getattr(arr, section)
        sub.log_prob_micro_batch_size_per_gpu = _per_gpu(
            sub.log_prob_micro_batch_size,
            sub.log_prob_micro_batch_size_per_gpu,
            world,
            f"{ARR}.{section}.log_prob_micro_batch_size",
            problems,
        )
    if a.strategy == "fsdp":
        log.info("%s.actor.strategy=fsdp runs as FSDP2 (fully_shard) in verl_lite", ARR)
        a.strategy = "fsdp2"
    _normalize_critic(cfg, problems)
    _normalize_reward_model(cfg, problems)
    for section, fsdp in _fsdp_configs(cfg):
        _fsdp_notices(f"{ARR}.{section}.fsdp_config", fsdp, problems)
    for ck in (a.checkpoint, cfg.critic.checkpoint):
        ck.load_contents = list(ck.save_contents) if ck.load_contents is None else ck.load_contents
    if uses_critic(cfg):
        _fsdp_notices("critic.model.fsdp_config", cfg.critic.model.fsdp_config, problems)
    if cfg.reward_model.enable:
        _fsdp_notices("reward_model.model.fsdp_config", cfg.reward_model.model.fsdp_config, problems)
    return problems


def _normalize_rollout(r) -> None:
    if r.name == "auto":
        r.name = resolve_rollout_name(r.name)
        log.info("%s.rollout.name=auto -> %s (vllm where it is installed, else hf)", ARR, r.name)
    if r.max_model_len is None:
        r.max_model_len = r.prompt_length + r.response_length


def _check_vllm(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    """The vLLM engine's keys; checked only when the vLLM rollout is chosen (TP > 1 is an error otherwise)."""
    r, key = cfg.actor_rollout_ref.rollout, f"{ARR}.rollout"
    if r.name != "vllm":
        if r.tensor_model_parallel_size != 1:
            problems.append(
                f"{key}.tensor_model_parallel_size={r.tensor_model_parallel_size} applies to the vLLM "
                f"rollout only, and {key}.name={r.name}; set it to 1 or {key}.name=vllm"
            )
        return
    if not vllm_available():
        problems.append(
            f"{key}.name=vllm but vLLM is not installed; run `make install` (VLLM=cpu or VLLM=cuda) "
            f"or set {key}.name=hf"
        )
    tp, world = r.tensor_model_parallel_size, world_size(cfg)
    if tp < 1 or world % tp:
        problems.append(
            f"{key}.tensor_model_parallel_size={tp} must divide the {world} workers "
            f"(trainer.nnodes x trainer.n_gpus_per_node): each engine spans {tp} consecutive ranks; "
            f"use a divisor of {world}"
        )
    if not 0 < r.gpu_memory_utilization <= 1:
        problems.append(f"{key}.gpu_memory_utilization={r.gpu_memory_utilization} must be in (0, 1]")
    seq_len = r.prompt_length + r.response_length
    if r.max_model_len < seq_len:
        problems.append(
            f"{key}.max_model_len={r.max_model_len} is below prompt_length + response_length = {seq_len}; "
            f"raise it to at least {seq_len} (or null)"
        )
    if not r.enable_chunked_prefill and r.max_num_batched_tokens < r.max_model_len:
        problems.append(
            f"{key}.max_num_batched_tokens={r.max_num_batched_tokens} is below max_model_len="
            f"{r.max_model_len} without chunked prefill; raise it or set enable_chunked_prefill=True"
        )
    for name in (
        "max_num_seqs",
        "max_num_batched_tokens",
        "update_weights_bucket_megabytes",
        "cpu_kv_cache_gb",
    ):
        if getattr(r, name) <= 0:
            problems.append(f"{key}.{name}={getattr(r, name)} must be positive")


def uses_critic(cfg: PPOTrainerConfig) -> bool:
    """A value model is trained only for GAE, as in verl."""
    return cfg.algorithm.adv_estimator == "gae"


def _normalize_critic(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    """verl's critic defaults: unset keys follow the actor's (path, batch sizes, epochs, loss mode)."""
    c, a, world = cfg.critic, cfg.actor_rollout_ref.actor, world_size(cfg)
    c.model.path = c.model.path or cfg.actor_rollout_ref.model.path
    c.ppo_mini_batch_size = c.ppo_mini_batch_size or a.ppo_mini_batch_size
    c.ppo_epochs = c.ppo_epochs or a.ppo_epochs
    c.use_dynamic_bsz = a.use_dynamic_bsz if c.use_dynamic_bsz is None else c.use_dynamic_bsz
    c.loss_agg_mode = c.loss_agg_mode or a.loss_agg_mode
    c.ppo_micro_batch_size_per_gpu = _per_gpu(
        c.ppo_micro_batch_size, c.ppo_micro_batch_size_per_gpu, world, "critic.ppo_micro_batch_size", problems
    )
    if c.ppo_micro_batch_size_per_gpu is None:
        c.ppo_micro_batch_size_per_gpu = a.ppo_micro_batch_size_per_gpu
    c.forward_micro_batch_size_per_gpu = _per_gpu(
        c.forward_micro_batch_size,
        c.forward_micro_batch_size_per_gpu,
        world,
        "critic.forward_micro_batch_size",
        problems,
    )
    if c.forward_micro_batch_size_per_gpu is None:
        c.forward_micro_batch_size_per_gpu = c.ppo_micro_batch_size_per_gpu
    c.forward_max_token_len_per_gpu = c.forward_max_token_len_per_gpu or c.ppo_max_token_len_per_gpu


def _normalize_reward_model(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    rm = cfg.reward_model
    rm.micro_batch_size_per_gpu = _per_gpu(
        rm.micro_batch_size,
        rm.micro_batch_size_per_gpu,
        world_size(cfg),
        "reward_model.micro_batch_size",
        problems,
    )


def _fsdp_configs(cfg: PPOTrainerConfig):
    arr = cfg.actor_rollout_ref
    return [("actor", arr.actor.fsdp_config), ("ref", arr.ref.fsdp_config)]


def _fsdp_notices(key: str, fsdp, problems: list[str]) -> None:
    """FSDP1-era keys and redundant offload combinations: accepted, said once, here on the driver."""
    if fsdp.use_orig_params is not None:
        log.info(
            "%s.use_orig_params=%s: FSDP2 always trains the original parameters; nothing to set",
            key,
            fsdp.use_orig_params,
        )
    if fsdp.limit_all_gathers is not None:
        log.info(
            "%s.limit_all_gathers=%s: FSDP2 bounds in-flight all-gathers itself; "
            "use reshard_after_forward / forward_prefetch to trade memory for overlap",
            key,
            fsdp.limit_all_gathers,
        )
    if fsdp.gradient_offload and not fsdp.offload_policy:
        problems.append(
            f"{key}.gradient_offload=True: in FSDP2 gradients live on the host only with "
            f"{key}.offload_policy=True; set offload_policy=True or gradient_offload=False"
        )
    if fsdp.offload_policy and (fsdp.param_offload or fsdp.optimizer_offload):
        log.info(
            "%s.offload_policy=True already keeps params, grads and optimizer state on the host; "
            "param_offload / optimizer_offload have nothing left to move and are ignored",
            key,
        )


def _check_batch_geometry(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    arr, world = cfg.actor_rollout_ref, world_size(cfg)
    a, n = arr.actor, arr.rollout.n
    tbs, mini = cfg.data.train_batch_size, a.ppo_mini_batch_size
    if tbs % world:
        problems.append(
            f"data.train_batch_size={tbs} prompts cannot be split over {world} workers "
            f"(trainer.nnodes x trainer.n_gpus_per_node); make it a multiple of {world}"
        )
    if mini > tbs or tbs % mini:
        problems.append(
            f"data.train_batch_size={tbs} is not a multiple of {ARR}.actor.ppo_mini_batch_size={mini}; "
            "each step must split into whole mini-batches"
        )
    if (mini * n) % world:
        problems.append(
            f"{ARR}.actor.ppo_mini_batch_size x rollout.n = {mini} x {n} = {mini * n} responses cannot be split "
            f"over {world} workers; make it a multiple of {world}"
        )
        return
    local_mini = mini * n // world
    micro = a.ppo_micro_batch_size_per_gpu
    _check_token_budgets(cfg, problems)
    fixed = not a.use_dynamic_bsz  # with dynamic batching, micro-batches come from the token budget
    if fixed and micro is None:
        problems.append(
            f"{ARR}.actor.ppo_micro_batch_size_per_gpu is not set; set it (e.g. {min(local_mini, 4)})"
        )
    elif fixed and (micro <= 0 or local_mini % micro):
        problems.append(
            f"{ARR}.actor.ppo_micro_batch_size_per_gpu={micro} does not divide the per-worker mini-batch of "
            f"{local_mini} responses (ppo_mini_batch_size {mini} x rollout.n {n} / {world} workers); "
            f"use a divisor of {local_mini}"
        )
    for section in ("rollout", "ref"):
        sub = getattr(arr, section)
        size = sub.log_prob_micro_batch_size_per_gpu
        if not sub.log_prob_use_dynamic_bsz and (size is None or size <= 0):
            problems.append(
                f"{ARR}.{section}.log_prob_micro_batch_size_per_gpu must be a positive integer, got {size}"
            )


def _check_token_budgets(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    """With dynamic batching every budget must hold at least one whole sequence."""
    arr = cfg.actor_rollout_ref
    seq_len = cfg.data.max_prompt_length + arr.rollout.response_length
    budgets = [
        ("actor.ppo_max_token_len_per_gpu", arr.actor.use_dynamic_bsz, arr.actor.ppo_max_token_len_per_gpu)
    ]
    for section in ("rollout", "ref"):
        sub = getattr(arr, section)
        budgets.append(
            (
                f"{section}.log_prob_max_token_len_per_gpu",
                sub.log_prob_use_dynamic_bsz,
                sub.log_prob_max_token_len_per_gpu,
            )
        )
    for key, enabled, budget in budgets:
        if enabled and budget < seq_len:
            problems.append(
                f"{ARR}.{key}={budget} is below one sequence (data.max_prompt_length + response_length = "
                f"{seq_len}); raise it to at least {seq_len}"
            )


def _check_choices(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    arr = cfg.actor_rollout_ref
    a = arr.actor
    choices = [
        (f"{ARR}.actor.strategy", a.strategy, ("fsdp2",)),
        (f"{ARR}.actor.loss_agg_mode", a.loss_agg_mode, LOSS_AGG_MODES),
        (f"{ARR}.actor.optim.warmup_style", a.optim.warmup_style, WARMUP_STYLES),
        (f"{ARR}.actor.policy_loss.loss_mode", a.policy_loss.loss_mode, POLICY_LOSSES.names()),
        ("algorithm.adv_estimator", cfg.algorithm.adv_estimator, ADV_ESTIMATORS.names()),
        ("reward_model.reward_manager", cfg.reward_model.reward_manager, REWARD_MANAGERS.names()),
        ("data.truncation", cfg.data.truncation, TRUNCATIONS),
        (f"{ARR}.rollout.name", arr.rollout.name, ROLLOUT_NAMES),
        (f"{ARR}.rollout.mode", arr.rollout.mode, ("sync",)),
        (f"{ARR}.rollout.dtype", arr.rollout.dtype, tuple(DTYPES)),
        *[
            (f"{ARR}.{section}.fsdp_config.{name}", value, tuple(DTYPES))
            for section, fsdp in _fsdp_configs(cfg)
            for name, value in [
                ("model_dtype", fsdp.model_dtype),
                ("mixed_precision.param_dtype", fsdp.mixed_precision.param_dtype),
                ("mixed_precision.reduce_dtype", fsdp.mixed_precision.reduce_dtype),
                ("mixed_precision.buffer_dtype", fsdp.mixed_precision.buffer_dtype),
            ]
        ],
        ("trainer.device", cfg.trainer.device, ("auto", "cpu", "cuda")),
    ]
    for key, value, allowed in choices:
        if value not in allowed:
            problems.append(f"{key}={value!r} is not one of {list(allowed)}")
    if not is_kl_type(a.kl_loss_type):
        problems.append(
            f"{ARR}.actor.kl_loss_type={a.kl_loss_type!r} is not one of {list(KL_TYPES)} (optionally with '+')"
        )
    for backend in cfg.trainer.logger:
        if backend not in BACKENDS:
            problems.append(f"trainer.logger: {backend!r} is not one of {list(BACKENDS)}")
    if not arr.hybrid_engine:
        problems.append(f"{ARR}.hybrid_engine=False: only the hybrid engine exists; set it to True")


def _check_values(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    arr = cfg.actor_rollout_ref
    r = arr.rollout
    positive = [
        ("data.train_batch_size", cfg.data.train_batch_size),
        ("data.max_prompt_length", cfg.data.max_prompt_length),
        ("data.max_response_length", cfg.data.max_response_length),
        (f"{ARR}.actor.ppo_mini_batch_size", arr.actor.ppo_mini_batch_size),
        (f"{ARR}.actor.ppo_epochs", arr.actor.ppo_epochs),
        (f"{ARR}.rollout.n", r.n),
        (f"{ARR}.rollout.val_kwargs.n", r.val_kwargs.n),
        ("trainer.nnodes", cfg.trainer.nnodes),
        ("trainer.n_gpus_per_node", cfg.trainer.n_gpus_per_node),
        ("trainer.total_epochs", cfg.trainer.total_epochs),
    ]
    for key, value in positive:
        if value is None or value <= 0:
            problems.append(f"{key}={value} must be a positive integer")
    if cfg.trainer.total_training_steps is not None and cfg.trainer.total_training_steps <= 0:
        problems.append(
            f"trainer.total_training_steps={cfg.trainer.total_training_steps} must be positive or null"
        )
    if cfg.trainer.log_val_generations < 0:
        problems.append(
            f"trainer.log_val_generations={cfg.trainer.log_val_generations} must be >= 0 (0: log none)"
        )
    memory = cfg.trainer.device_memory_gb
    if memory is not None and memory <= 0:
        problems.append(f"trainer.device_memory_gb={memory} must be a positive size in GB, or null")
    if r.do_sample and r.temperature <= 0:
        problems.append(
            f"{ARR}.rollout.temperature={r.temperature} must be > 0 when do_sample=True (or set do_sample=False)"
        )
    if arr.actor.clip_ratio_c <= 1.0:
        problems.append(f"{ARR}.actor.clip_ratio_c={arr.actor.clip_ratio_c} must be > 1 (the dual-clip cap)")
    if cfg.algorithm.adv_estimator == "grpo" and r.n < 2:
        problems.append(
            f"algorithm.adv_estimator=grpo needs {ARR}.rollout.n >= 2 (a group per prompt), got {r.n}"
        )
    if r.prompt_length != cfg.data.max_prompt_length:
        problems.append(
            f"{ARR}.rollout.prompt_length={r.prompt_length} differs from data.max_prompt_length="
            f"{cfg.data.max_prompt_length}; prompts are padded to data.max_prompt_length, so set them equal"
        )


def _check_paths(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    model = cfg.actor_rollout_ref.model.path
    if not os.path.isdir(model):
        problems.append(f"{ARR}.model.path={model!r}: no such folder; point it at a local HF model folder")
    elif not os.path.exists(os.path.join(model, "config.json")):
        problems.append(f"{ARR}.model.path={model!r}: no config.json there; is it a HF model folder?")
    for key in ("train_files", "val_files"):
        files = getattr(cfg.data, key)
        if key == "val_files" and not files:
            continue
        for f in [files] if isinstance(files, str) else list(files or []):
            if not os.path.isfile(f):
                problems.append(
                    f"data.{key}: {f!r} does not exist; generate it or point data.{key} at a parquet file"
                )
    if cfg.data.tokenizer and not os.path.isdir(cfg.data.tokenizer):
        problems.append(f"data.tokenizer={cfg.data.tokenizer!r}: no such folder")
    path = cfg.custom_reward_function.path
    if path and not os.path.isfile(path):
        problems.append(f"custom_reward_function.path={path!r} does not exist")


def _check_checkpointing(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    t = cfg.trainer
    if t.resume_mode not in ("auto", "disable", "resume_path"):
        problems.append(
            f"trainer.resume_mode={t.resume_mode!r} is not one of ['auto', 'disable', 'resume_path']"
        )
    if t.resume_mode == "resume_path" and not t.resume_from_path:
        problems.append("trainer.resume_mode=resume_path needs trainer.resume_from_path=<.../global_step_N>")
    for key in ("max_actor_ckpt_to_keep", "max_critic_ckpt_to_keep"):
        value = getattr(t, key, None)
        if value is not None and value < 1:
            problems.append(
                f"trainer.{key}={value} must be a positive integer, or null to keep every checkpoint"
            )
    sections = [(f"{ARR}.actor.checkpoint", cfg.actor_rollout_ref.actor.checkpoint)]
    if uses_critic(cfg):
        sections.append(("critic.checkpoint", cfg.critic.checkpoint))
    for prefix, ck in sections:
        for key, contents in (("save_contents", ck.save_contents), ("load_contents", ck.load_contents)):
            unknown = [c for c in contents if c not in CONTENTS]
            if unknown:
                problems.append(f"{prefix}.{key}: {unknown} not among {list(CONTENTS)}")
        if t.save_freq > 0 and "model" not in ck.save_contents:
            problems.append(
                f"{prefix}.save_contents={ck.save_contents} lacks 'model': a checkpoint without "
                "the weights cannot be resumed from; add 'model' (or set trainer.save_freq=-1)"
            )


def _check_critic(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    """The critic's batch geometry follows the actor's rules, with critic.* keys in the messages."""
    c, n, world = cfg.critic, cfg.actor_rollout_ref.rollout.n, world_size(cfg)
    tbs, mini = cfg.data.train_batch_size, c.ppo_mini_batch_size
    for key, value, allowed in [
        ("critic.strategy", c.strategy, ("fsdp2",)),
        ("critic.loss_agg_mode", c.loss_agg_mode, LOSS_AGG_MODES),
        ("critic.optim.warmup_style", c.optim.warmup_style, WARMUP_STYLES),
        *[(f"critic.model.fsdp_config.{k}", v, tuple(DTYPES)) for k, v in _dtypes(c.model.fsdp_config)],
    ]:
        if value not in allowed:
            problems.append(f"{key}={value!r} is not one of {list(allowed)}")
    if mini <= 0 or c.ppo_epochs <= 0:
        problems.append(
            f"critic.ppo_mini_batch_size={mini} and critic.ppo_epochs={c.ppo_epochs} must be positive"
        )
        return
    if mini > tbs or tbs % mini:
        problems.append(
            f"data.train_batch_size={tbs} is not a multiple of critic.ppo_mini_batch_size={mini}; "
            "each step must split into whole critic mini-batches"
        )
    if (mini * n) % world:
        problems.append(
            f"critic.ppo_mini_batch_size x rollout.n = {mini} x {n} = {mini * n} responses cannot be split over "
            f"{world} workers; make it a multiple of {world}"
        )
        return
    local_mini = mini * n // world
    micro, forward = c.ppo_micro_batch_size_per_gpu, c.forward_micro_batch_size_per_gpu
    if not c.use_dynamic_bsz and (micro is None or micro <= 0 or local_mini % micro):
        problems.append(
            f"critic.ppo_micro_batch_size_per_gpu={micro} does not divide the per-worker critic mini-batch of "
            f"{local_mini} responses (critic.ppo_mini_batch_size {mini} x rollout.n {n} / {world} workers); "
            f"use a divisor of {local_mini}"
        )
    if not c.use_dynamic_bsz and (forward is None or forward <= 0):
        problems.append(f"critic.forward_micro_batch_size_per_gpu must be a positive integer, got {forward}")
    seq_len = cfg.data.max_prompt_length + cfg.actor_rollout_ref.rollout.response_length
    for key in ("ppo_max_token_len_per_gpu", "forward_max_token_len_per_gpu"):
        if c.use_dynamic_bsz and getattr(c, key) < seq_len:
            problems.append(
                f"critic.{key}={getattr(c, key)} is below one sequence (data.max_prompt_length + "
                f"response_length = {seq_len}); raise it to at least {seq_len}"
            )
    if c.cliprange_value <= 0:
        problems.append(f"critic.cliprange_value={c.cliprange_value} must be > 0")
    if not os.path.isfile(os.path.join(c.model.path, "config.json")):
        problems.append(f"critic.model.path={c.model.path!r}: no HF model folder (config.json) there")
    else:
        _check_same_vocab(cfg, "critic.model.path", c.model.path, problems)
    if c.model.tokenizer_path and c.model.tokenizer_path != _actor_tokenizer(cfg):
        problems.append(
            f"critic.model.tokenizer_path={c.model.tokenizer_path!r}: the critic reads the actor's token ids, so "
            "a different tokenizer is not supported; leave it null"
        )
    if cfg.trainer.critic_warmup < 0:
        problems.append(f"trainer.critic_warmup={cfg.trainer.critic_warmup} must be >= 0")


def _dtypes(fsdp) -> list[tuple[str, str]]:
    mp = fsdp.mixed_precision
    return [
        ("model_dtype", fsdp.model_dtype),
        ("mixed_precision.param_dtype", mp.param_dtype),
        ("mixed_precision.reduce_dtype", mp.reduce_dtype),
        ("mixed_precision.buffer_dtype", mp.buffer_dtype),
    ]


def _actor_tokenizer(cfg: PPOTrainerConfig) -> str:
    return cfg.data.tokenizer or cfg.actor_rollout_ref.model.path


def _vocab_size(path: str) -> int | None:
    try:
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    return config.get("vocab_size", (config.get("text_config") or {}).get("vocab_size"))


def _check_same_vocab(cfg: PPOTrainerConfig, key: str, path: str, problems: list[str]) -> None:
    """A critic or reward model reads the actor's token ids: its embedding must cover the same vocabulary."""
    actor_path = cfg.actor_rollout_ref.model.path
    mine, actors = _vocab_size(path), _vocab_size(actor_path)
    if mine is not None and actors is not None and mine != actors:
        problems.append(
            f"{key}={path!r} has vocab_size={mine} but the actor ({ARR}.model.path={actor_path!r}) has "
            f"{actors}; it reads the actor's token ids, so use a model with the actor's tokenizer"
        )


FILTER_METRICS = ("seq_reward", "seq_final_reward", "acc", "score")


def _check_algorithm(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    alg, n = cfg.algorithm, cfg.actor_rollout_ref.rollout.n
    for key, value in (("algorithm.gamma", alg.gamma), ("algorithm.lam", alg.lam)):
        if not 0.0 <= value <= 1.0:
            problems.append(f"{key}={value} must be in [0, 1]")
    if not is_kl_type(alg.kl_penalty):
        problems.append(f"algorithm.kl_penalty={alg.kl_penalty!r} is not one of {list(KL_TYPES)}")
    ctrl = alg.kl_ctrl
    if ctrl.type not in ("fixed", "adaptive"):
        problems.append(f"algorithm.kl_ctrl.type={ctrl.type!r} is not one of ['fixed', 'adaptive']")
    elif ctrl.type == "adaptive" and (ctrl.target_kl <= 0 or ctrl.horizon <= 0):
        problems.append(
            f"algorithm.kl_ctrl.type=adaptive needs algorithm.kl_ctrl.target_kl > 0 and horizon > 0, "
            f"got target_kl={ctrl.target_kl}, horizon={ctrl.horizon}"
        )
    fg = alg.filter_groups
    if fg.enable and fg.metric not in FILTER_METRICS:
        problems.append(
            f"algorithm.filter_groups.metric={fg.metric!r} is not one of {list(FILTER_METRICS)} "
            "(needed with algorithm.filter_groups.enable=True)"
        )
    if fg.enable and n < 2:
        problems.append(
            f"algorithm.filter_groups.enable=True needs {ARR}.rollout.n >= 2 (groups to compare), got {n}"
        )
    if alg.adv_estimator == "rloo" and n < 2:
        problems.append(f"algorithm.adv_estimator=rloo needs {ARR}.rollout.n >= 2 (leave-one-out), got {n}")


def _check_reward_model(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    rm = cfg.reward_model
    if not rm.enable:
        return
    path = rm.model.path
    if not path:
        problems.append(
            "reward_model.enable=True but reward_model.model.path is not set; point it at a reward model"
        )
    elif not os.path.isfile(os.path.join(path, "config.json")):
        problems.append(f"reward_model.model.path={path!r}: no HF model folder (config.json) there")
    else:
        _check_same_vocab(cfg, "reward_model.model.path", path, problems)
    if rm.model.input_tokenizer:
        problems.append(
            f"reward_model.model.input_tokenizer={rm.model.input_tokenizer!r}: re-tokenising for a reward model "
            "with another vocabulary is not supported; use a reward model that shares the actor's tokenizer "
            "and set input_tokenizer=null"
        )
    size = rm.micro_batch_size_per_gpu
    if not rm.use_dynamic_bsz and (size is None or size <= 0):
        problems.append(f"reward_model.micro_batch_size_per_gpu must be a positive integer, got {size}")
    if rm.strategy not in ("fsdp2", "fsdp"):
        problems.append(f"reward_model.strategy={rm.strategy!r} is not one of ['fsdp2']")


def validate(cfg: PPOTrainerConfig, num_gpus: int) -> None:
    """Raise ConfigError listing every problem; `num_gpus` is what the cluster offers (0: CPU)."""
    problems = normalize(cfg)
    _check_choices(cfg, problems)
    _check_values(cfg, problems)
    _check_vllm(cfg, problems)
    _check_algorithm(cfg, problems)
    _check_reward_model(cfg, problems)
    if not problems:
        _check_batch_geometry(cfg, problems)
    if not problems and uses_critic(cfg):
        _check_critic(cfg, problems)
    _check_paths(cfg, problems)
    _check_checkpointing(cfg, problems)
    if cfg.trainer.device == "cuda" and num_gpus == 0:
        problems.append("trainer.device=cuda but no GPU is visible; use trainer.device=auto or cpu")
    if problems:
        raise ConfigError(problems)
