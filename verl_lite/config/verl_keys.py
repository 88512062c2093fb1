"""verl 0.9.1's keys that the dataclass schema does not declare, read from verl's own config.

verl_0_9_1_ppo_trainer.yaml (beside this file) is verl 0.9.1's generated ppo_trainer config, kept as
data. Every key of it the schema lacks is added to the schema's node once per process (config/keys.py
builds the node from the dataclasses and these facts; Hydra's ConfigStore holds it), so `--cfg job`
shows it and a command may name it:
  - a verl 0.9 spelling that config/dialects.py maps onto a key the schema holds (`reward.*`) links
    that key (`${reward_model.num_workers}`): `--cfg job` shows the value the run uses;
  - any other key keeps verl's `${...}` link where it links a key that exists here, else verl's value.
config/support.py accepts each at that default and refuses it by name when set otherwise.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

FACTS = Path(__file__).with_name("verl_0_9_1_ppo_trainer.yaml")

# what a key's section is, for the one-line refusal (the first part of the key that names one)
FEATURES = {
    "distillation": "distillation",
    "transfer_queue": "transfer queue (batches travel through Ray's object store here)",
    "tiled_mlp": "tiled MLP (use gradient checkpointing)",
    "qat": "quantization-aware training (QAT)",
    "turbo_config": "FSDP turbo engine",
    "disaggregation": "prefill/decode disaggregation",
    "router_replay": "MoE router replay",
    "mtp": "multi-token prediction (MTP)",
    "lora": "Megatron LoRA block (FSDP's LoRA keys are the model's lora_rank, lora_alpha, ...; of the block, actor_rollout_ref.model.lora.merge is here)",
    "profiler": "profiler",
    "global_profiler": "profiler",
    "skip": "rollout skipping",
    "_target_": "config class selection (_target_)",
    "v1": "V1 async trainer",
    "mm_processor_kwargs": "multi-modal input",
    "audio_key": "multi-modal input",
}


def feature(key: str) -> str:
    """What verl 0.9 feature `key` belongs to, as the refusal names it."""
    parts = key.split(".")
    return next((FEATURES[p] for p in reversed(parts) if p in FEATURES), f"option {parts[-1]}")


def leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    """{dotted key: value} of a plain container; an empty dict is a leaf."""
    if not isinstance(node, dict) or (not node and prefix):
        return {prefix: node}
    found: dict[str, Any] = {}
    for name, value in node.items():
        found.update(leaves(value, f"{prefix}.{name}" if prefix else str(name)))
    return found


@functools.cache
def facts() -> tuple[dict[str, Any], dict]:
    """verl 0.9.1's config: ({key: value as written}, the tree with its links resolved against itself)."""
    tree = OmegaConf.load(FACTS)
    written = leaves(OmegaConf.to_container(tree, resolve=False))
    return written, OmegaConf.to_container(tree, resolve=True, throw_on_missing=False)
