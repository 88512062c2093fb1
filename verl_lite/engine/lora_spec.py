"""A role's LoRA settings, read from its config section in one place (no torch, no PEFT).

verl's rule: LoRA is on for a model section when `lora_rank > 0` or, for the actor, when
`lora_adapter_path` names a saved PEFT adapter to continue from (whose own rank and targets then
win). The engine (engine/lora.py), the rollouts, the start-up checks and the memory planner all
read LoRA through `LoraSpec.of`, so they agree on whether it is on and on what it adapts.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

ADAPTER_CONFIG = "adapter_config.json"  # a PEFT adapter folder's config (beside its safetensors)
KEYS = {"causal_lm": "actor_rollout_ref.model", "value": "critic.model"}


@dataclass(frozen=True)
class LoraSpec:
    """verl's critic section has no exclude_modules or lora_adapter_path: for it they read as None."""

    key: str  # the config section, for messages: actor_rollout_ref.model | critic.model
    model_kind: str  # causal_lm (actor) | value (critic)
    rank: int
    alpha: int
    target_modules: object
    exclude_modules: object
    adapter_path: str | None
    base_path: str  # the model folder the adapters sit on (recorded in the saved adapter)
    merge: bool = False  # the actor's lora.merge: the rollout gets W + scale * B A, not the adapter

    @classmethod
    def of(cls, model_cfg, model_kind: str = "causal_lm") -> LoraSpec | None:
        """None unless LoRA is on: a positive rank or a saved adapter to continue from."""
        adapter_path = getattr(model_cfg, "lora_adapter_path", None)
        if getattr(model_cfg, "lora_rank", 0) <= 0 and adapter_path is None:  # the reward model has none
            return None
        if model_kind not in KEYS:
            raise ValueError(f"LoRA applies to the actor and the critic, not to a {model_kind} model")
        return cls(
            key=KEYS[model_kind],
            model_kind=model_kind,
            rank=model_cfg.lora_rank,
            alpha=model_cfg.lora_alpha,
            target_modules=_modules(model_cfg.target_modules),
            exclude_modules=_modules(getattr(model_cfg, "exclude_modules", None)),
            adapter_path=adapter_path,
            base_path=model_cfg.path,
            merge=bool(getattr(getattr(model_cfg, "lora", None), "merge", False)),
        )

    def saved_config(self) -> dict:
        """The saved adapter's adapter_config.json ({} when training fresh adapters)."""
        if self.adapter_path is None:
            return {}
        path = os.path.join(self.adapter_path, ADAPTER_CONFIG)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{self.key}.lora_adapter_path={self.adapter_path!r}: no {ADAPTER_CONFIG} there; point it "
                "at a PEFT adapter folder (e.g. a checkpoint's actor/lora_adapter)"
            )
        with open(path) as f:
            return json.load(f)

    @property
    def max_rank(self) -> int:
        """The adapter's largest rank: lora_rank, or what the saved adapter has."""
        saved = self.saved_config()
        if not saved:
            return self.rank
        return max([saved["r"], *(saved.get("rank_pattern") or {}).values()])

    @property
    def modules(self) -> tuple[object, object]:
        """(target_modules, exclude_modules) in effect: the config's, or the saved adapter's."""
        saved = self.saved_config()
        if not saved:
            return self.target_modules, self.exclude_modules
        return _modules(saved.get("target_modules")), _modules(saved.get("exclude_modules"))


def served_adapter(model_cfg) -> LoraSpec | None:
    """The actor's LoRA as its rollout serves it, an adapter on the base (vLLM's LoRA slot, PEFT in the
    HF rollout); None without LoRA, or with verl 0.9's model.lora.merge (the rollout then holds plain
    weights with the adapter merged in: rollout/weight_sync.py's MergedSync)."""
    spec = LoraSpec.of(model_cfg)
    return spec if spec is not None and not spec.merge else None


def lora_enabled(model_cfg, model_kind: str = "causal_lm") -> bool:
    return LoraSpec.of(model_cfg, model_kind) is not None


def _modules(value):
    """target_modules / exclude_modules as PEFT takes them: a string (regex or 'all-linear') or a list."""
    if value is None or isinstance(value, str):
        return value
    return [str(v) for v in value]
