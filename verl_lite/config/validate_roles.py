"""Validation of the parts a run may or may not have: the vLLM engine, the critic, the reward model,
and the algorithm's own keys (KL control, dynamic sampling). validate.py calls these in order;
each adds problems naming the key, the value and the fix.
"""

from __future__ import annotations

import json
import logging
import os

from verl_lite.algos import ADV_ESTIMATORS, POLICY_LOSSES
from verl_lite.algos.kl import KL_TYPES, is_kl_type
from verl_lite.algos.loss_agg import LOSS_AGG_MODES
from verl_lite.algos.registry import select
from verl_lite.config.common import ARR, STRATEGIES, fsdp_dtypes, per_gpu, world_size
from verl_lite.config.schema import VERL_MODEL, PPOTrainerConfig
from verl_lite.config.validate_levers import dp_size
from verl_lite.engine.optim import WARMUP_STYLES
from verl_lite.engine.parallelize import DTYPES
from verl_lite.rollout import resolve_rollout_name, vllm_available

log = logging.getLogger("verl_lite.config.validate")


def normalize_rollout(r, world: int) -> None:
    if r.name == "auto":
        r.name = resolve_rollout_name(r.name)
        log.info("%s.rollout.name=auto -> %s (vllm where it is installed, else hf)", ARR, r.name)
    if r.max_model_len is None:
        r.max_model_len = r.prompt_length + r.response_length
    if r.mode == "async":
        log.info(
            "%s.rollout.mode=async: generation runs synchronously in the hybrid engine, the same samples "
            "and updates as verl's async server mode",
            ARR,
        )
    if r.name == "hf" and r.tensor_model_parallel_size != 1:
        log.info(
            "%s.rollout.tensor_model_parallel_size=%d does not apply to the hf rollout: each of the %d "
            "workers generates for its own prompts with its full copy of the weights",
            ARR,
            r.tensor_model_parallel_size,
            world,
        )


def check_vllm(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    """The vLLM engine's keys; checked only when the vLLM rollout is chosen (TP > 1 is an error otherwise)."""
    r, key = cfg.actor_rollout_ref.rollout, f"{ARR}.rollout"
    if r.name != "vllm":
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


def uses_reference(cfg: PPOTrainerConfig) -> bool:
    """A reference policy is built when a KL term needs it: in the loss or in the reward (verl's rule;
    the trainer and the memory planner both ask here)."""
    return bool(cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward)


def uses_critic(cfg: PPOTrainerConfig) -> bool:
    """critic.enable when set; else whether the advantage estimator's spec needs a critic (gae), as in verl."""
    if cfg.critic.enable is not None:
        return cfg.critic.enable
    name = cfg.algorithm.adv_estimator
    return ADV_ESTIMATORS.problem(name) is None and ADV_ESTIMATORS.spec(name).needs_critic


def _linked_per_gpu(global_size, per_gpu_size, world: int, key: str, problems: list[str]):
    """The critic's per-GPU keys default to its deprecated global ones (verl's links): a global size
    given on its own (the per-GPU one still equal to it) becomes a per-GPU size, as in verl's worker."""
    if global_size is not None and per_gpu_size == global_size:
        per_gpu_size = None
    return per_gpu(global_size, per_gpu_size, world, key, problems)


def normalize_critic(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    """verl's deprecated global critic micro sizes become per-GPU ones (the other keys follow the
    actor's through the schema's links)."""
    c, world = cfg.critic, dp_size(cfg, "critic")  # verl splits global sizes over data-parallel ranks
    c.ppo_micro_batch_size_per_gpu = _linked_per_gpu(
        c.ppo_micro_batch_size, c.ppo_micro_batch_size_per_gpu, world, "critic.ppo_micro_batch_size", problems
    )
    c.forward_micro_batch_size_per_gpu = _linked_per_gpu(
        c.forward_micro_batch_size,
        c.forward_micro_batch_size_per_gpu,
        world,
        "critic.forward_micro_batch_size",
        problems,
    )


def normalize_reward_model(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    rm = cfg.reward_model
    rm.micro_batch_size_per_gpu = per_gpu(
        rm.micro_batch_size,
        rm.micro_batch_size_per_gpu,
        world_size(cfg),
        "reward_model.micro_batch_size",
        problems,
    )


def check_critic(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    """The critic's batch geometry follows the actor's rules, with critic.* keys in the messages."""
    c, n, world = cfg.critic, cfg.actor_rollout_ref.rollout.n, world_size(cfg)
    tbs, mini = cfg.data.train_batch_size, c.ppo_mini_batch_size
    for key, value, allowed in [
        ("critic.strategy", c.strategy, STRATEGIES),
        ("critic.loss_agg_mode", c.loss_agg_mode, LOSS_AGG_MODES),
        ("critic.optim.lr_scheduler_type", c.optim.lr_scheduler_type, WARMUP_STYLES),
        *[(f"critic.model.fsdp_config.{k}", v, tuple(DTYPES)) for k, v in fsdp_dtypes(c.model.fsdp_config)],
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
    dp = dp_size(cfg, "critic")
    ranks = f"{dp} data-parallel ranks" if dp != world else f"{world} workers"
    if (mini * n) % dp:
        problems.append(
            f"critic.ppo_mini_batch_size x rollout.n = {mini} x {n} = {mini * n} responses cannot be split over "
            f"{ranks}; make it a multiple of {dp}"
        )
        return
    local_mini = mini * n // dp
    micro, forward = c.ppo_micro_batch_size_per_gpu, c.forward_micro_batch_size_per_gpu
    if not c.use_dynamic_bsz and (micro is None or micro <= 0 or local_mini % micro):
        problems.append(
            f"critic.ppo_micro_batch_size_per_gpu={micro} does not divide the per-worker critic mini-batch of "
            f"{local_mini} responses (critic.ppo_mini_batch_size {mini} x rollout.n {n} / {ranks}); "
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
    if c.model.path == VERL_MODEL and not os.path.isdir(os.path.expanduser(VERL_MODEL)):
        problems.append(
            f"critic.model.path={c.model.path!r} is verl's placeholder and this run trains a critic "
            f"(algorithm.adv_estimator={cfg.algorithm.adv_estimator}, critic.enable={c.enable}); "
            "set critic.model.path (e.g. the actor's model)"
        )
    elif not os.path.isfile(os.path.join(c.model.path, "config.json")):
        problems.append(f"critic.model.path={c.model.path!r}: no HF model folder (config.json) there")
    else:
        _check_same_vocab(cfg, "critic.model.path", c.model.path, problems)
    if c.model.tokenizer_path and c.model.tokenizer_path not in (_actor_tokenizer(cfg), c.model.path):
        problems.append(
            f"critic.model.tokenizer_path={c.model.tokenizer_path!r}: the critic reads the actor's token ids, so "
            "a different tokenizer is not supported; leave it null"
        )
    if cfg.trainer.critic_warmup < 0:
        problems.append(f"trainer.critic_warmup={cfg.trainer.critic_warmup} must be >= 0")


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


def check_algorithm(cfg: PPOTrainerConfig, problems: list[str]) -> None:
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


def check_extensions(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    """The advantage estimator and the policy loss, by their registered specs (algos/registry.py)."""
    _check_estimator(cfg, problems)
    _check_policy_loss(cfg.actor_rollout_ref.actor, problems)


def _check_estimator(cfg: PPOTrainerConfig, problems: list[str]) -> None:
    name, n = cfg.algorithm.adv_estimator, cfg.actor_rollout_ref.rollout.n
    problem = ADV_ESTIMATORS.problem(name)
    if problem:
        problems.append(problem)
        return
    spec = ADV_ESTIMATORS.spec(name)
    if n < spec.min_group_size:
        problems.append(
            f"algorithm.adv_estimator={name} needs {ARR}.rollout.n >= {spec.min_group_size} "
            f"({spec.why_group}), got {n}"
        )
    if spec.needs_critic and cfg.critic.enable is False:
        problems.append(
            f"algorithm.adv_estimator={name} needs a critic (its values), but critic.enable=False; "
            "set critic.enable=True (or leave it null) or choose an estimator without a critic"
        )
    for key, wanted in spec.requires:
        value = select(cfg, key)
        if value != wanted:
            problems.append(f"algorithm.adv_estimator={name} needs {key}={wanted}, got {value}")
    problems.extend(ADV_ESTIMATORS.check_values(spec, cfg))


def _check_policy_loss(actor, problems: list[str]) -> None:
    mode = actor.policy_loss.loss_mode
    problem = POLICY_LOSSES.problem(mode)
    if problem:
        problems.append(problem)
        return
    spec = POLICY_LOSSES.spec(mode)
    problems.extend(POLICY_LOSSES.check_values(spec, actor))
    if spec.agg_mode and spec.agg_mode != actor.loss_agg_mode:
        log.info(
            "%s.actor.policy_loss.loss_mode=%s aggregates pg_loss %s, as in verl; loss_agg_mode=%s applies "
            "to the entropy and KL terms",
            ARR,
            mode,
            spec.agg_mode,
            actor.loss_agg_mode,
        )
    if not spec.split_invariant:
        log.info(
            "%s.actor.policy_loss.loss_mode=%s picks its tokens within each micro-batch, as in verl: its "
            "update depends on the micro-batch size and the number of workers",
            ARR,
            mode,
        )


def check_reward_model(cfg: PPOTrainerConfig, problems: list[str]) -> None:
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
    size = rm.micro_batch_size_per_gpu
    if not rm.use_dynamic_bsz and (size is None or size <= 0):
        problems.append(f"reward_model.micro_batch_size_per_gpu must be a positive integer, got {size}")
    if rm.strategy not in STRATEGIES:
        problems.append(f"reward_model.strategy={rm.strategy!r} is not one of {list(STRATEGIES)}")
