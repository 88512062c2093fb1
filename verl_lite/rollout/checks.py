"""The rollout's start-up steps (registered in verl_lite/preflight.py): `resolve_rollout` fills what
the rollout derives (rollout.name=auto, max_model_len) and says once what verl_lite does with
verl's async mode and with TP on the hf backend; `check_rollout` names bad rollout values;
`check_vllm_engine` holds the vLLM engine's own argument rules against the actor's model
(rollout/vllm_args.py)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from verl_lite.config.common import trainer_mode
from verl_lite.rollout import ROLLOUTS, resolve_rollout_name, vllm_available
from verl_lite.rollout.tp_group import tp_size_problem
from verl_lite.rollout.vllm_args import check_engine_args
from verl_lite.utils.model_files import read_config

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig

KEY = "actor_rollout_ref.rollout"
VERL_ONLY_ROLLOUTS = ("sglang", "trtllm")  # verl's other backends: refused as such, not as typos
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
    if r.name in VERL_ONLY_ROLLOUTS:
        names = ", ".join(ROLLOUTS.names())
        return [f"{KEY}.name={r.name} is not supported by verl_lite: use {names} (or auto)"]
    if r.name not in ROLLOUTS.names():  # rollout.dtype's choices: config/values.py
        return [f"{KEY}.name={r.name!r} is not one of {list(ROLLOUTS.names())}"]
    if r.name != "vllm":
        return []
    if (
        trainer_mode(cfg) == "separate_async"
    ):  # the engines live in the rollout group (>= 1: trainer/checks.py)
        sized_by = "actor_rollout_ref.rollout.nnodes x actor_rollout_ref.rollout.n_gpus_per_node"
        return _check_vllm(r, max(1, (r.nnodes or 0) * (r.n_gpus_per_node or 0)), sized_by)
    return _check_vllm(r, run.world)


def _reserved_engine_kwargs(r) -> list[str]:
    from verl_lite.rollout.vllm_rollout import RESERVED_VLLM_ARGS

    problems = []
    for name in dict(r.engine_kwargs.vllm):
        if name in RESERVED_VLLM_ARGS:
            key = RESERVED_VLLM_ARGS[name]
            instead = f"set {key}" if key else "the hybrid engine sets it"
            problems.append(f"{KEY}.engine_kwargs.vllm.{name} is not supported by verl_lite: {instead}")
    return problems


def _check_vllm(r, world: int, sized_by: str = "trainer.nnodes x trainer.n_gpus_per_node") -> list[str]:
    """The vLLM engine's keys together (one value alone: config/domains.py); only for the vLLM rollout."""
    problems = []
    if not vllm_available():
        problems.append(
            f"{KEY}.name=vllm but vLLM is not installed; run `make install` (VLLM=cpu or VLLM=cuda) or set {KEY}.name=hf"
        )
    tp_problem = tp_size_problem(world, r.tensor_model_parallel_size, sized_by)
    problems += [tp_problem] if tp_problem else []
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
    return problems + _reserved_engine_kwargs(r)


def check_vllm_engine(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """vLLM's own engine-argument rules against the actor model's config.json (the folder is known good)."""
    r = cfg.actor_rollout_ref.rollout
    if r.name != "vllm":
        return []
    model = cfg.actor_rollout_ref.model
    config = read_config(model.path) | dict(model.override_config or {})
    return check_engine_args(r, config, "actor_rollout_ref.model.path", run.use_gpu)
