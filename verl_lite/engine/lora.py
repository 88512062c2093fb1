"""LoRA with PEFT: low-rank adapters trained on a frozen base model (verl's `model.lora_*` keys).

`lora_rank > 0`, or a saved adapter in `lora_adapter_path`, turns LoRA on for a role's model (the
actor's `actor_rollout_ref.model`, the critic's `critic.model`; read by lora_spec.LoraSpec). PEFT wraps the HF model before
FSDP2 shards it, so the frozen base weights and the trainable adapters sit in the same FSDP units;
only the adapters get gradients and optimizer state. The reference policy is the same model with
the adapters switched off (`disable_adapter`), so LoRA needs no second copy of the weights.

Parameter names under PEFT, and the names this module maps them to:

    base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight    the frozen base weight
        -> model.layers.0.self_attn.q_proj.weight                         (base_param_name: HF's name)
    base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight   (rank, in) adapter
        -> base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight    (PEFT's file format)

The adapter's initial values come from a generator of their own (`INIT_SEED`): every rank and every
run starts from the same adapter whatever the process's random state, which sharding relies on
(each rank keeps its shard of what it initialised) and which leaves the training RNG untouched.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch
from safetensors.torch import save_file

from verl_lite.engine.lora_spec import LoraSpec

if TYPE_CHECKING:  # PEFT itself is imported where LoRA is used: ~0.3-1 s that a run without LoRA, and
    # the driver (it imports the workers' classes), never needs
    from peft import LoraConfig, PeftConfig, PeftModel

PEFT_PREFIX = "base_model.model."
ADAPTER_WEIGHTS = "adapter_model.safetensors"
INIT_SEED = 0
TASK_TYPES = {"causal_lm": "CAUSAL_LM", "value": "TOKEN_CLS"}  # PEFT's TaskType values (a str enum)
VALUE_HEAD = "score"  # the critic's per-token value head (utils/hf_model.py)


def _exclude_head(exclude):
    """The value head is trained in full (modules_to_save), so it never gets an adapter too."""
    if exclude is None:
        return [VALUE_HEAD]
    if isinstance(exclude, str):  # a regex PEFT matches against the whole module name
        return rf"(?:{exclude})|(?:.*\.)?{VALUE_HEAD}"
    return [*exclude, VALUE_HEAD]


def build_lora_config(spec: LoraSpec) -> LoraConfig:
    if spec.rank <= 0:
        raise ValueError(f"{spec.key}.lora_rank={spec.rank}: LoRA needs a positive rank (e.g. 8, 16, 32)")
    if spec.alpha <= 0:
        raise ValueError(f"{spec.key}.lora_alpha={spec.alpha}: must be positive (verl's default is 16)")
    from peft import LoraConfig

    exclude = spec.exclude_modules
    return LoraConfig(
        task_type=TASK_TYPES[spec.model_kind],
        r=spec.rank,
        lora_alpha=spec.alpha,
        target_modules=spec.target_modules,
        exclude_modules=_exclude_head(exclude) if spec.model_kind == "value" else exclude,
        bias="none",
    )


def apply_lora(module: torch.nn.Module, spec: LoraSpec) -> PeftModel:
    """`module` wrapped by PEFT with fresh adapters (lora_rank, lora_alpha, target_modules,
    exclude_modules) or those saved in `lora_adapter_path` (which then decides rank and targets),
    trainable; every base parameter frozen. The critic's value head (`score`) is trained in full
    (PEFT's modules_to_save for token classification)."""
    from peft import PeftModel, get_peft_model

    path = spec.adapter_path
    spec.saved_config()  # a missing adapter folder: one line naming the key
    config = None if path is not None else build_lora_config(spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(INIT_SEED)
        try:
            if path is not None:
                peft_model = PeftModel.from_pretrained(module, path, is_trainable=True)
            else:
                peft_model = get_peft_model(module, config)
        except ValueError as e:  # PEFT's own message says which target matched nothing
            source = f"lora_adapter_path={path!r}" if path else f"target_modules={spec.target_modules!r}"
            raise ValueError(f"{spec.key}.{source}: {e}") from e
    peft_model.peft_config["default"].base_model_name_or_path = spec.base_path
    return peft_model


def base_param_name(name: str) -> str:
    """The HF name of a frozen base parameter (what a rollout engine loads)."""
    return name.removeprefix(PEFT_PREFIX).replace(".base_layer.", ".")


def lora_layers(peft_model: torch.nn.Module) -> dict[str, tuple[str, str, float]]:
    """{base weight's parameter name: (lora_A's, lora_B's, scale)} for every adapted linear layer
    (what verl 0.9's model.lora.merge folds in: W + scale * B @ A, scale = PEFT's alpha / r)."""
    from peft.tuners.lora import LoraLayer
    from peft.utils import ModulesToSaveWrapper

    params = dict(peft_model.named_parameters())  # a tied LM head's weight is the embedding's
    out = {}
    for name, layer in peft_model.named_modules():
        module = name.removeprefix(PEFT_PREFIX)  # the HF model's name, for messages
        if isinstance(layer, ModulesToSaveWrapper):
            raise ValueError(
                f"actor_rollout_ref.model.lora.merge=True: {module} is trained in full beside the adapter "
                "(PEFT's modules_to_save), which a merge of W + scale * B A does not send; set lora.merge=False"
            )
        if not isinstance(layer, LoraLayer):
            continue
        odd = [
            kind
            for kind, on in (
                (
                    "not a linear layer",
                    "default" not in layer.lora_A or getattr(layer, "fan_in_fan_out", False),
                ),
                ("DoRA", getattr(layer, "use_dora", {}).get("default", False)),
                ("a LoRA bias", getattr(layer, "lora_bias", {}).get("default", False)),
                ("a tied weight", f"{name}.base_layer.weight" not in params),
            )
            if on
        ]
        if odd:
            raise ValueError(
                f"actor_rollout_ref.model.lora.merge=True merges W + scale * B A of plain linear layers; "
                f"{module}'s adapter has {odd[0]}: leave it out of target_modules or set lora.merge=False"
            )
        out[f"{name}.base_layer.weight"] = (
            f"{name}.lora_A.default.weight",
            f"{name}.lora_B.default.weight",
            float(layer.scaling["default"]),
        )
    return out


@torch.no_grad()
def merged_weight(w: torch.Tensor, b: torch.Tensor, a: torch.Tensor, scale: float) -> torch.Tensor:
    """W + scale * (B @ A) in at least float32 (a new tensor), for any rows of W with the same rows of
    B. Each element is built from plain products and sums, k = 0..r-1 in order (not a matmul, whose
    summation order may follow the shape, nor a fused multiply-add, which a vectorised loop may use
    where its scalar tail does not): an FSDP2 row shard of the result is exactly those rows of the
    whole, so the weight check's trainer side (engine/weight_fingerprint.py) matches what a sync sent."""
    dtype = torch.promote_types(w.dtype, torch.float32)
    b, a = b.to(dtype), a.to(dtype)
    delta, term = (
        torch.zeros(w.shape, dtype=dtype, device=w.device),
        torch.empty(w.shape, dtype=dtype, device=w.device),
    )
    for k in range(a.shape[0]):
        delta += torch.mul(b[:, k : k + 1], a[k : k + 1], out=term)
    del term
    return delta.mul_(scale).add_(w.to(dtype))  # in delta: two float32 buffers of W's size at most


def adapter_file_state(peft_model: PeftModel, tensors: Iterable[tuple[str, torch.Tensor]]) -> dict:
    """Trainable tensors (parameter names) in PEFT's file format: names without the adapter name,
    as `save_pretrained` writes them and vLLM reads them."""
    from peft import get_peft_model_state_dict

    state = dict(tensors)
    return get_peft_model_state_dict(peft_model, state_dict=state, save_embedding_layers=False)


def adapter_file_names(peft_model: PeftModel, names: Iterable[str]) -> dict[str, str]:
    """{parameter name: its name in PEFT's file format} for the adapter parameters among `names`
    (the names `adapter_file_state` gives their tensors; what a rollout receives)."""
    probes = {n: torch.empty(0) for n in names}
    by_id = {id(t): n for n, t in probes.items()}
    return {by_id[id(t)]: file for file, t in adapter_file_state(peft_model, probes.items()).items()}


def adapter_config_dict(config: PeftConfig) -> dict:
    """The adapter's config as adapter_config.json holds it (JSON types only)."""
    return json.loads(
        json.dumps(config.to_dict(), default=lambda v: sorted(v) if isinstance(v, set) else str(v))
    )


def save_adapter(folder: str, state: dict[str, torch.Tensor], config: PeftConfig) -> None:
    """A PEFT adapter folder (adapter_config.json + adapter_model.safetensors) that
    `PeftModel.from_pretrained` and vLLM's LoRARequest load."""
    os.makedirs(folder, exist_ok=True)
    save_file(
        {k: v.detach().contiguous().cpu() for k, v in state.items()}, os.path.join(folder, ADAPTER_WEIGHTS)
    )
    config.save_pretrained(folder)


def hf_module(module: torch.nn.Module) -> torch.nn.Module:
    """The HF model under PEFT's wrapper (the module itself without LoRA: where PEFT was never
    imported, no module is a PeftModel)."""
    peft = sys.modules.get("peft")
    return module.get_base_model() if peft is not None and isinstance(module, peft.PeftModel) else module


def merged_state_dict(full_state: dict[str, torch.Tensor], config: PeftConfig, hf_config) -> dict:
    """HF weights with the adapter folded in (W + scale * B @ A, by PEFT's own merge), from a full
    state dict in PEFT's parameter names. The model is built on the meta device and the tensors are
    assigned, so no copy of the weights is allocated beyond the merged ones; `full_state` is left as
    it is (safe_merge: each merged weight is a new tensor). On one CPU rank the full state dict's
    tensors are the engine's own params, which an in-place merge would change under the run."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    builder = (
        AutoModelForTokenClassification if config.task_type == TASK_TYPES["value"] else AutoModelForCausalLM
    )
    with torch.device("meta"):  # a copy of the config: PEFT's merge may edit it (tie_word_embeddings)
        peft_model = get_peft_model(builder.from_config(copy.deepcopy(hf_config)), copy.deepcopy(config))
    missing, unexpected = peft_model.load_state_dict(full_state, strict=False, assign=True)
    if unexpected or [k for k in missing if "lm_head" not in k]:
        raise ValueError(f"LoRA state does not fit the model: missing {missing}, unexpected {unexpected}")
    peft_model.get_base_model().tie_weights()  # assigned tensors are separate; re-tie as loading would
    model = peft_model.merge_and_unload(safe_merge=True)
    return {k: v for k, v in model.state_dict().items() if v.device.type != "meta"}
