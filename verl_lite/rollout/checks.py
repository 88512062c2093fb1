"""The rollout's start-up steps (registered in verl_lite/startup.py): `resolve_rollout` fills what
the rollout derives (rollout.name=auto, max_model_len) and says once what verl_lite does with
verl's async mode and with TP on the hf backend; `check_rollout` names bad rollout values."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from verl_lite.engine.parallelize import DTYPES
from verl_lite.rollout import ROLLOUTS, resolve_rollout_name, vllm_available

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig

KEY = "actor_rollout_ref.rollout"
log = logging.getLogger("verl_lite.rollout")


def resolve_rollout(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    r = cfg.actor_rollout_ref.rollout
    if r.name == "auto":
        r.name = resolve_rollout_name(r.name)
        log.info("%s.name=auto -> %s (vllm where it is installed, else hf)", KEY, r.name)
    if r.max_model_len is None:
        r.max_model_len = r.prompt_length + r.response_length
    if r.mode == "async":
        log.info(
            "%s.mode=async: generation runs synchronously in the hybrid engine, the same samples and "
            "updates as verl's async server mode",
            KEY,
        )
    if r.name == "hf" and r.tensor_model_parallel_size != 1:
        log.info(
            "%s.tensor_model_parallel_size=%d does not apply to the hf rollout: each of the %d workers "
            "generates for its own prompts with its full copy of the weights",
            KEY,
            r.tensor_model_parallel_size,
            run.world,
        )
    return []


def check_rollout(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    r = cfg.actor_rollout_ref.rollout
    problems = [
        f"{KEY}.{key}={value!r} is not one of {list(allowed)}"
        for key, value, allowed in (
            ("name", r.name, tuple(ROLLOUTS.names())),
            ("dtype", r.dtype, tuple(DTYPES)),
        )
        if value not in allowed
    ]
    return problems + (_check_vllm(r, run.world) if r.name == "vllm" else [])


def _reserved_engine_kwargs(r) -> list[str]:
    from verl_lite.rollout.vllm_rollout import RESERVED_VLLM_ARGS

    problems = []
    for name in dict(r.engine_kwargs.vllm):
        if name in RESERVED_VLLM_ARGS:
            key = RESERVED_VLLM_ARGS[name]
            instead = f"set {key}" if key else "the hybrid engine sets it"
            problems.append(f"{KEY}.engine_kwargs.vllm.{name} is not supported by verl_lite: {instead}")
    return problems


def _check_vllm(r, world: int) -> list[str]:
    """The vLLM engine's keys; checked only when the vLLM rollout is chosen."""
    problems = []
    if not vllm_available():
        problems.append(
            f"{KEY}.name=vllm but vLLM is not installed; run `make install` (VLLM=cpu or VLLM=cuda) or set {KEY}.name=hf"
        )
    tp = r.tensor_model_parallel_size
    if tp < 1 or world % tp:
        problems.append(
            f"{KEY}.tensor_model_parallel_size={tp} must divide the {world} workers (trainer.nnodes x "
            f"trainer.n_gpus_per_node): each engine spans {tp} consecutive ranks; use a divisor of {world}"
        )
    if not 0 < r.gpu_memory_utilization <= 1:
        problems.append(f"{KEY}.gpu_memory_utilization={r.gpu_memory_utilization} must be in (0, 1]")
    seq_len = r.prompt_length + r.response_length
    if r.max_model_len < seq_len:
        problems.append(
            f"{KEY}.max_model_len={r.max_model_len} is below prompt_length + response_length = {seq_len}; "
            f"raise it to at least {seq_len} (or null)"
        )
    if not r.enable_chunked_prefill and r.max_num_batched_tokens < r.max_model_len:
        problems.append(
            f"{KEY}.max_num_batched_tokens={r.max_num_batched_tokens} is below max_model_len={r.max_model_len} "
            "without chunked prefill; raise it or set enable_chunked_prefill=True"
        )
    for name in (
        "max_num_seqs",
        "max_num_batched_tokens",
        "update_weights_bucket_megabytes",
        "cpu_kv_cache_gb",
    ):
        if getattr(r, name) <= 0:
            problems.append(f"{KEY}.{name}={getattr(r, name)} must be positive")
    return problems + _reserved_engine_kwargs(r)
