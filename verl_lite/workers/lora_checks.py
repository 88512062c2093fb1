"""LoRA's start-up step (registered in verl_lite/preflight.py): LoRA's keys (verl's meaning) and how
the rollout gets its weights. LoRA spans the engine (adapters on FSDP2) and the rollout (vLLM's
adapter slot), so its rules sit with the worker that joins them.

LoRA is on for the actor when actor_rollout_ref.model.lora_rank > 0 or lora_adapter_path is set,
for the critic when critic.model.lora_rank > 0. What can be known before Ray is checked here, each
problem one line naming the key, the value and the fix: the target and exclude lists, the saved
adapter's folder, the ranks vLLM serves, and verl's rule that layered_summon needs the base weights
preloaded in vLLM (those two only where vLLM serves the adapter: not with model.lora.merge). The rank's and alpha's domains (>= 0, > 0) are in config/domains.py.

Every name in a target_modules or exclude_modules list must name a module of the model (PEFT's
rule: the module's name, or its last dotted parts), and a regex must match one: PEFT itself stops
only when no target matches at all, so `[q_proj, v_prooj]` would adapt q_proj alone and train on.
The model's module names come from the model its config.json builds on the meta device.
"""

from __future__ import annotations

import logging
import os
import re
from difflib import get_close_matches
from typing import TYPE_CHECKING

from verl_lite.engine.lora_spec import ADAPTER_CONFIG, LoraSpec
from verl_lite.rollout import VLLM_LORA_RANKS, resolve_rollout_name

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig

log = logging.getLogger("verl_lite")

ARR = "actor_rollout_ref"


def _check_modules(key: str, value, problems: list[str]) -> None:
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) for v in value):
        problems.append(f"{key}={value!r}: give all-linear, a regex string or a list of module names")


def module_names(model_cfg, key: str, kind: str) -> list[str] | None:
    """The names of every module of the model `model_cfg` builds (None when it cannot be built: the
    models step reports the folder)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    from verl_lite.utils.hf_model import model_config

    auto = AutoModelForCausalLM if kind == "causal_lm" else AutoModelForTokenClassification
    try:
        config = model_config(model_cfg, key, kind)
        with torch.device("meta"):
            model = auto.from_config(config, trust_remote_code=model_cfg.trust_remote_code)
    except Exception:  # a broken folder or config: check_models names it
        return None
    return [name for name, _ in model.named_modules() if name]


def _unmatched(patterns, names: list[str]) -> list[str]:
    """The entries of a target/exclude list (or the regex string) that match no module (PEFT's rules)."""
    if isinstance(patterns, str):
        if patterns == "all-linear" or any(re.fullmatch(patterns, n) for n in names):
            return []
        return [patterns]
    return [p for p in patterns or [] if not any(n == p or n.endswith("." + p) for n in names)]


def _modules_exist(key: str, model, kind: str, problems: list[str]) -> None:
    spec = LoraSpec.of(model, kind)
    if spec is None:
        return
    try:
        targets, excludes = spec.modules  # the config's, or the saved adapter's
    except (OSError, ValueError):
        return
    names = module_names(model, key, kind)
    if names is None:
        return
    for field, value in (("target_modules", targets), ("exclude_modules", excludes)):
        missing = _unmatched(value, names)
        if not missing:
            continue
        leaves = sorted({n.rsplit(".", 1)[-1] for n in names if not n.rsplit(".", 1)[-1].isdigit()})
        close = [m for p in missing for m in get_close_matches(str(p), leaves, n=1)]
        hint = f"did you mean {close}? " if close else ""
        line = (
            f"{key}.{field}: {missing} match no module of the model ({model.path}); {hint}its modules "
            f"are named {leaves[:24]}{' ...' if len(leaves) > 24 else ''}"
        )
        if field == "target_modules":  # PEFT refuses it too: nothing (or less than asked) would train
            problems.append(line)
        else:  # excluding nothing is what verl's CI means by exclude_modules=DONT_EXCLUDE; PEFT warns
            log.warning("%s: nothing is excluded (as in verl)", line)


def _check_model(key: str, model, kind: str, problems: list[str]) -> bool:
    """The LoRA keys of one model section; whether LoRA is on for it."""
    adapter = getattr(model, "lora_adapter_path", None)  # verl's critic section has none
    if LoraSpec.of(model, kind) is None:
        return False
    before = len(problems)
    _check_modules(f"{key}.target_modules", model.target_modules, problems)
    if model.target_modules is None:
        problems.append(f"{key}.target_modules=None: give all-linear or a list of module names")
    _check_modules(f"{key}.exclude_modules", getattr(model, "exclude_modules", None), problems)
    if adapter is not None and not os.path.isfile(os.path.join(str(adapter), ADAPTER_CONFIG)):
        problems.append(
            f"{key}.lora_adapter_path={adapter!r}: no {ADAPTER_CONFIG} there; point it at a PEFT adapter "
            "folder (a checkpoint's global_step_N/actor/lora_adapter)"
        )
    if len(problems) == before:  # the lists are well formed: each name must match a module
        _modules_exist(key, model, kind, problems)
    return True


def _peft_on_meta(model, key: str):
    """The PEFT model of the actor's section on the meta device, from the config's or the saved
    adapter's LoRA settings (None where it cannot be built: the other checks name why)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from verl_lite.engine.lora import build_lora_config
    from verl_lite.utils.hf_model import model_config

    spec = LoraSpec.of(model)
    try:
        config = model_config(model, key, "causal_lm")
        lora = LoraConfig.from_pretrained(spec.adapter_path) if spec.adapter_path else build_lora_config(spec)
        with torch.device("meta"):
            return get_peft_model(
                AutoModelForCausalLM.from_config(config, trust_remote_code=model.trust_remote_code), lora
            )
    except Exception:  # a broken folder, config or target list
        return None


def _merge_problem(peft_model) -> str | None:
    """With lora.merge: what a merge of W + scale * B A cannot send (DoRA, a LoRA bias, modules trained
    in full, a tied LM head; engine/lora.lora_layers says it)."""
    from verl_lite.engine.lora import lora_layers

    try:
        lora_layers(peft_model)
    except ValueError as e:
        return str(e)
    return None


def _fused_head_problem(peft_model, key: str) -> str | None:
    """model.use_fused_kernels computes log-probs from the LM head's own weight (engine/token_head.py):
    an adapter on the head would be left out of them."""
    from peft.tuners.lora import LoraLayer

    if not isinstance(peft_model.get_output_embeddings(), LoraLayer):
        return None
    return (
        f"{key}.use_fused_kernels=True with a LoRA adapter on the LM head: the fused log-probs are "
        f"computed from the head's base weight; leave the LM head out of {key}.target_modules (or the "
        f"adapter), or set {key}.use_fused_kernels=False"
    )


def check_lora(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    problems: list[str] = []
    r = cfg.actor_rollout_ref.rollout
    if run.critic:  # verl reads the critic's LoRA keys only when there is a critic
        _check_model("critic.model", cfg.critic.model, "value", problems)
    model = cfg.actor_rollout_ref.model
    lora_on = _check_model(f"{ARR}.model", model, "causal_lm", problems)
    if lora_on and (model.lora.merge or model.use_fused_kernels) and not problems:
        peft_model = _peft_on_meta(model, f"{ARR}.model")
        if peft_model is not None:
            found = [
                _merge_problem(peft_model) if model.lora.merge else None,
                _fused_head_problem(peft_model, f"{ARR}.model") if model.use_fused_kernels else None,
            ]
            problems += [p for p in found if p]
    if (
        not lora_on
        or resolve_rollout_name(r.name) != "vllm"
        or model.lora.merge  # vLLM serves merged weights, no adapter: its LoRA limits do not apply
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
