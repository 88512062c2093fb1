"""LoRA's start-up step (registered in verl_lite/preflight.py): LoRA's keys (verl's meaning) and how
the rollout gets its weights. LoRA spans the engine (adapters on FSDP2) and the rollout (vLLM's
adapter slot), so its rules sit with the worker that joins them.

LoRA is on for the actor when actor_rollout_ref.model.lora_rank > 0 or lora_adapter_path is set,
for the critic when critic.model.lora_rank > 0. What can be known before Ray is checked here, each
problem one line naming the key, the value and the fix: the target and exclude lists, the saved
adapter's folder, the ranks vLLM serves, and verl's rule that layered_summon needs the base weights
preloaded in vLLM. The rank's and alpha's domains (>= 0, > 0) are in config/domains.py.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from verl_lite.engine.lora_spec import ADAPTER_CONFIG, LoraSpec
from verl_lite.rollout import LOAD_FORMATS, VLLM_LORA_RANKS, resolve_rollout_name

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig

ARR = "actor_rollout_ref"


def _check_modules(key: str, value, problems: list[str]) -> None:
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) for v in value):
        problems.append(f"{key}={value!r}: give all-linear, a regex string or a list of module names")


def _check_model(key: str, model, kind: str, problems: list[str]) -> bool:
    """The LoRA keys of one model section; whether LoRA is on for it."""
    adapter = getattr(model, "lora_adapter_path", None)  # verl's critic section has none
    if LoraSpec.of(model, kind) is None:
        return False
    _check_modules(f"{key}.target_modules", model.target_modules, problems)
    if model.target_modules is None:
        problems.append(f"{key}.target_modules=None: give all-linear or a list of module names")
    _check_modules(f"{key}.exclude_modules", getattr(model, "exclude_modules", None), problems)
    if adapter is not None and not os.path.isfile(os.path.join(str(adapter), ADAPTER_CONFIG)):
        problems.append(
            f"{key}.lora_adapter_path={adapter!r}: no {ADAPTER_CONFIG} there; point it at a PEFT adapter "
            "folder (a checkpoint's global_step_N/actor/lora_adapter)"
        )
    return True


def check_lora(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    problems: list[str] = []
    r = cfg.actor_rollout_ref.rollout
    if r.load_format not in LOAD_FORMATS:
        problems.append(f"{ARR}.rollout.load_format={r.load_format!r} is not one of {list(LOAD_FORMATS)}")
    if run.critic:  # verl reads the critic's LoRA keys only when there is a critic
        _check_model("critic.model", cfg.critic.model, "value", problems)
    model = cfg.actor_rollout_ref.model
    if (
        not _check_model(f"{ARR}.model", model, "causal_lm", problems)
        or resolve_rollout_name(r.name) != "vllm"
    ):
        return problems
    if model.lora_rank > VLLM_LORA_RANKS[-1]:
        problems.append(
            f"{ARR}.model.lora_rank={model.lora_rank}: vLLM serves LoRA ranks up to {VLLM_LORA_RANKS[-1]}; "
            f"use a smaller rank or {ARR}.rollout.name=hf"
        )
    if r.layered_summon and r.load_format == "dummy":
        problems.append(
            f"{ARR}.rollout.layered_summon=True needs the base model preloaded in vLLM: set "
            f"{ARR}.rollout.load_format=safetensors (verl's rule)"
        )
    return problems
