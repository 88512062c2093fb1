"""Start-up normalisation and validation: every problem named by its key, its value and the fix.

`normalize` fills derived values the way verl does (rollout lengths from data.*, clip bounds from
clip_ratio, per-GPU micro sizes from deprecated global ones). `validate` collects every problem it
finds and raises them together, before Ray or any worker starts. The checks of the optional parts
(vLLM engine, critic, reward model, algorithm keys) live in validate_roles.py; what both share, in
common.py.
"""

from __future__ import annotations

import logging
import os

from verl_lite.algos.kl import KL_TYPES, is_kl_type
from verl_lite.algos.loss_agg import LOSS_AGG_MODES
from verl_lite.config.common import ARR, STRATEGIES, fsdp_dtypes, per_gpu, world_size
from verl_lite.config.errors import ConfigError
from verl_lite.config.schema import VERL_MODEL, VERL_REWARD_MODEL, VERL_TRAIN, VERL_VAL, PPOTrainerConfig
from verl_lite.config.validate_lora import check_lora
from verl_lite.config.validate_roles import (
    check_algorithm,
    check_critic,
    check_extensions,
    check_reward_model,
    check_vllm,
    normalize_critic,
    normalize_reward_model,
    normalize_rollout,
    uses_critic,
)
from verl_lite.data.rlhf_dataset import TRUNCATIONS
from verl_lite.engine.checkpoint import CONTENTS
from verl_lite.engine.optim import WARMUP_STYLES
from verl_lite.engine.parallelize import DTYPES
from verl_lite.reward.managers import REWARD_MANAGERS
from verl_lite.rollout import ROLLOUTS
from verl_lite.trainer.tracking import BACKENDS
from verl_lite.utils import device as dev

log = logging.getLogger(__name__)


def _clip_bounds(a) -> tuple[float, float]:
    """verl's rule: a bound set to null is clip_ratio (both default to 0.2, so clip_ratio alone
    changes nothing unless they are nulled)."""
    return (
        a.clip_ratio if a.clip_ratio_low is None else a.clip_ratio_low,
        a.clip_ratio if a.clip_ratio_high is None else a.clip_ratio_high,
    )


def _scheduler(optim) -> None:
    """verl's deprecated optim.warmup_style, when set, replaces optim.lr_scheduler_type."""
    if optim.warmup_style is not None:
        optim.lr_scheduler_type = optim.warmup_style


def normalize(cfg: PPOTrainerConfig) -> list[str]:
    problems: list[str] = []
    arr, world = cfg.actor_rollout_ref, world_size(cfg)
    normalize_rollout(arr.rollout, world)
    a = arr.actor
    a.clip_ratio_low, a.clip_ratio_high = _clip_bounds(a)
    _scheduler(a.optim)
    _scheduler(cfg.critic.optim)
    a.ppo_micro_batch_size_per_gpu = per_gpu(
        a.ppo_micro_batch_size,
        a.ppo_micro_batch_size_per_gpu,
        world,
        f"{ARR}.actor.ppo_micro_batch_size",
        problems,
    )
    for section in ("rollout", "ref"):
        sub = getattr(arr, section)
        sub.log_prob_micro_batch_size_per_gpu = per_gpu(
            sub.log_prob_micro_batch_size,
            sub.log_prob_micro_batch_size_per_gpu,
            world,
            f"{ARR}.{section}.log_prob_micro_batch_size",
            problems,
        )
    normalize_critic(cfg, problems)
    normalize_reward_model(cfg, problems)
    for section, fsdp in _fsdp_configs(cfg):
        _fsdp_notices(f"{ARR}.{section}.fsdp_config", fsdp, problems)
    if uses_critic(cfg):
        _fsdp_notices("critic.model.fsdp_config", cfg.critic.model.fsdp_config, problems)
    if cfg.reward_model.enable:
        _fsdp_notices("reward_model.model.fsdp_config", cfg.reward_model.model.fsdp_config, problems)
    return problems


def _fsdp_configs(cfg: PPOTrainerConfig):
    arr = cfg.actor_rollout_ref
    return [("actor", arr.actor.fsdp_config), ("ref", arr.ref.fsdp_config)]


def _fsdp_notices(key: str, fsdp, problems: list[str]) -> None:
    """FSDP1-era keys and redundant offload combinations: accepted, said once, here on the driver."""
    if fsdp.use_orig_params:
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
        (f"{ARR}.actor.strategy", a.strategy, STRATEGIES),
        (f"{ARR}.actor.loss_agg_mode", a.loss_agg_mode, LOSS_AGG_MODES),
        (f"{ARR}.actor.optim.lr_scheduler_type", a.optim.lr_scheduler_type, WARMUP_STYLES),
        ("reward_manager.name", cfg.reward_manager.name, REWARD_MANAGERS.names()),
        ("data.truncation", cfg.data.truncation, TRUNCATIONS),
        (f"{ARR}.rollout.name", arr.rollout.name, tuple(ROLLOUTS.names())),
        (f"{ARR}.rollout.mode", arr.rollout.mode, ("async", "sync")),
        (f"{ARR}.rollout.dtype", arr.rollout.dtype, tuple(DTYPES)),
        *[
            (f"{ARR}.{section}.fsdp_config.{name}", value, tuple(DTYPES))
            for section, fsdp in _fsdp_configs(cfg)
            for name, value in fsdp_dtypes(fsdp)
        ],
        ("trainer.device", cfg.trainer.device, dev.DEVICE_CHOICES),
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
    if r.prompt_length != cfg.data.max_prompt_length:
        problems.append(
            f"{ARR}.rollout.prompt_length={r.prompt_length} differs from data.max_prompt_length="
            f"{cfg.data.max_prompt_length}; prompts are padded to data.max_prompt_length, so set them equal"
        )


DEMO_COMMAND = "python -m verl_lite.main_ppo --config-name demo"


def check_placeholders(cfg: PPOTrainerConfig) -> None:
    """verl's placeholder model and data paths, still in place and absent here: one message naming
    them all and the demo command (what a bare `python -m verl_lite.main_ppo` gets)."""
    d, arr = cfg.data, cfg.actor_rollout_ref
    candidates = [(f"{ARR}.model.path", arr.model.path, VERL_MODEL)]
    if uses_critic(cfg):
        candidates.append(("critic.model.path", cfg.critic.model.path, VERL_MODEL))
    if cfg.reward_model.enable:
        candidates.append(("reward_model.model.path", cfg.reward_model.model.path, VERL_REWARD_MODEL))
    candidates += [("data.train_files", d.train_files, VERL_TRAIN), ("data.val_files", d.val_files, VERL_VAL)]
    missing = [
        f"{key}={placeholder}"
        for key, value, placeholder in candidates
        if value in (placeholder, [placeholder]) and not os.path.exists(os.path.expanduser(placeholder))
    ]
    if missing:
        raise ConfigError(
            [
                f"{', '.join(missing)}: verl's placeholder path{'s' if len(missing) > 1 else ''}, not on this "
                f"machine; point {'them' if len(missing) > 1 else 'it'} at your model and parquet files, or run "
                f"the embedded tiny demo: {DEMO_COMMAND}"
            ]
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


def validate(cfg: PPOTrainerConfig, num_gpus: int) -> None:
    """Raise ConfigError listing every problem; `num_gpus` is what the cluster offers (0: CPU)."""
    problems = normalize(cfg)
    _check_choices(cfg, problems)
    _check_values(cfg, problems)
    check_lora(cfg, problems)
    check_vllm(cfg, problems)
    check_algorithm(cfg, problems)
    check_extensions(cfg, problems)
    check_reward_model(cfg, problems)
    if not problems:
        _check_batch_geometry(cfg, problems)
    if not problems and uses_critic(cfg):
        check_critic(cfg, problems)
    _check_paths(cfg, problems)
    _check_checkpointing(cfg, problems)
    if dev.requires_accelerator(cfg.trainer.device) and num_gpus == 0:
        problems.append("trainer.device=cuda but no GPU is visible; use trainer.device=auto or cpu")
    if problems:
        raise ConfigError(problems)
