"""Rollout backends behind one small interface (base.py); `build_rollout` picks one by name.

`vllm` (vllm_rollout.py) is the default where vLLM is installed (`make install` installs it);
`hf` (hf_rollout.py, transformers' generate) is the reference backend and the fallback.
"""

from __future__ import annotations

import importlib.util

ROLLOUT_NAMES = ("vllm", "hf")
# rollout.load_format: dummy starts vLLM without weights (the first sync brings them); the others read
# model.path at start-up (the HF rollout always does)
LOAD_FORMATS = ("dummy", "auto", "safetensors")
# the max_lora_rank values vLLM 0.32 accepts (vllm.config.lora.MaxLoRARanks): a LoRA rank is served
# at the smallest that holds it; kept here so the config check needs no vLLM import
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_available() -> bool:
    """Whether vLLM is installed (checked without importing it: the import takes seconds)."""
    return importlib.util.find_spec("vllm") is not None


def resolve_rollout_name(name: str) -> str:
    """`auto` becomes vllm where it is installed, else hf; other names are kept."""
    if name == "auto":
        return "vllm" if vllm_available() else "hf"
    return name


def build_rollout(name: str, model_cfg, rollout_cfg, tokenizer, rank: int):
    name = resolve_rollout_name(name)
    if name == "hf":
        from verl_lite.rollout.hf_rollout import HFRollout

        return HFRollout(model_cfg, rollout_cfg, tokenizer, rank)
    if name == "vllm":
        from verl_lite.rollout.vllm_rollout import VLLMRollout

        return VLLMRollout(model_cfg, rollout_cfg, tokenizer, rank)
    raise ValueError(
        f"actor_rollout_ref.rollout.name={name!r} is not a rollout backend; use one of {list(ROLLOUT_NAMES)}"
    )
