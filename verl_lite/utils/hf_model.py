"""Loading local Hugging Face causal LMs and tokenizers, with errors that name the config key."""

from __future__ import annotations

import copy
import importlib
import os

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()  # one bar per weight load per worker drowns the training log


def check_model_dir(path: str, key: str = "actor_rollout_ref.model.path") -> None:
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{key}={path!r}: no such folder; point it at a local HF model folder")
    if not os.path.exists(os.path.join(path, "config.json")):
        raise FileNotFoundError(f"{key}={path!r}: no config.json in the folder; is it a HF model folder?")


def load_causal_lm(model_cfg, dtype: torch.dtype) -> torch.nn.Module:
    """The model of `model_cfg.path` on the host in `dtype`, with the config's overrides applied."""
    check_model_dir(model_cfg.path)
    if model_cfg.external_lib:
        importlib.import_module(model_cfg.external_lib)
    config = AutoConfig.from_pretrained(model_cfg.path, trust_remote_code=model_cfg.trust_remote_code)
    for key, value in (model_cfg.override_config or {}).items():
        if not hasattr(config, key):
            raise ValueError(
                f"actor_rollout_ref.model.override_config.{key}: the model config has no such field"
            )
        setattr(config, key, value)
    model = AutoModelForCausalLM.from_pretrained(
        model_cfg.path, config=config, dtype=dtype, trust_remote_code=model_cfg.trust_remote_code
    )
    return model


def load_tokenizer(path: str, trust_remote_code: bool = False):
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"tokenizer folder {path!r} does not exist; set data.tokenizer or actor_rollout_ref.model.path"
        )
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def save_hf_folder(
    target: str, config, generation_config=None, state_dict=None, tokenizer=None, model_cls=None
) -> None:
    """A folder `from_pretrained` loads: config, generation config, tokenizer, and, when `state_dict`
    (full, unsharded tensors) is given, the weights as safetensors.

    `model_cls` (e.g. Qwen2ForCausalLM, or a critic's Qwen2ForTokenClassification) is recorded as
    the config's architecture; without it the config's own is used. The model is built on the meta
    device and the tensors are assigned, so no second copy of the weights is allocated; tied weights
    are re-tied before saving, as from_pretrained would."""
    os.makedirs(target, exist_ok=True)
    config = copy.deepcopy(config)
    if model_cls is not None:
        config.architectures = [model_cls.__name__]
    config.save_pretrained(target)
    if generation_config is not None:
        generation_config.save_pretrained(target)
    if tokenizer is not None:
        tokenizer.save_pretrained(target)
    if state_dict is None:
        return
    arch = (getattr(config, "architectures", None) or [None])[0]
    model_cls = model_cls or (getattr(transformers, arch, None) if arch else None)
    with torch.device("meta"):
        model = model_cls(config) if model_cls else AutoModelForCausalLM.from_config(config)
    missing, unexpected = model.load_state_dict(state_dict, strict=False, assign=True)
    if unexpected or [k for k in missing if "lm_head" not in k]:
        raise ValueError(
            f"weights do not fit {type(model).__name__}: missing {missing}, unexpected {unexpected}"
        )
    model.tie_weights()
    model.save_pretrained(target)
