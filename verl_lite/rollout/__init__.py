"""Rollout backends behind one interface (base.Rollout), chosen by name from a registry.

`vllm` (vllm_rollout.py) is preferred where vLLM is installed (`make install` installs it); `hf`
(hf_rollout.py, transformers' generate) is the reference backend and the fallback. A backend is
registered with the import path of its class, so listing or validating names never imports vLLM
(seconds, and process-wide side effects), and with its memory model (memory.py), which the planner
asks for the backend the run names. `auto` is resolved in one place, `resolve_rollout_name`,
when the config is normalised; everything after that sees a backend's own name.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

from verl_lite.rollout.memory import RolloutMemory, hf_memory, vllm_memory
from verl_lite.utils.class_path import load_target

KEY = "actor_rollout_ref.rollout.name"
# the max_lora_rank values vLLM 0.32 accepts (vllm.config.lora.MaxLoRARanks): a LoRA rank is served
# at the smallest that holds it; kept here so the config check needs no vLLM import
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


@dataclass(frozen=True)
class Backend:
    name: str
    target: str  # "package.module:Class", imported only when a rollout is built
    is_available: Callable[[], bool]
    memory: Callable[..., RolloutMemory]  # its memory model, given the planner's Request (memory.py)
    install_hint: str = ""  # what to do when it is not available

    def load(self) -> type:
        return load_target(self.target)


class RolloutRegistry:
    """Backends by name; `auto` picks the first available one in registration order."""

    def __init__(self):
        self._backends: dict[str, Backend] = {}

    def register(self, backend: Backend) -> None:
        if backend.name in self._backends or backend.name == "auto":
            raise ValueError(f"rollout backend {backend.name!r} registered twice (or named 'auto')")
        self._backends[backend.name] = backend

    def names(self) -> list[str]:
        return list(self._backends)

    def get(self, name: str) -> Backend:
        if name == "auto":
            raise ValueError(
                f"{KEY}=auto reached a rollout builder unresolved; normalise the config first "
                "(start-up resolves it: rollout/checks.py resolve_rollout)"
            )
        if name not in self._backends:
            raise ValueError(f"{KEY}={name!r} is not a rollout backend; use one of {['auto', *self.names()]}")
        return self._backends[name]

    def resolve(self, name: str) -> str:
        if name != "auto":
            return name
        for backend in self._backends.values():
            if backend.is_available():
                return backend.name
        raise ValueError(f"{KEY}=auto: no rollout backend is available among {self.names()}")


def _installed(module: str) -> Callable[[], bool]:
    """Whether `module` is installed, checked without importing it (vLLM's import takes seconds)."""
    return lambda: importlib.util.find_spec(module) is not None


ROLLOUTS = RolloutRegistry()
ROLLOUTS.register(
    Backend(
        "vllm",
        "verl_lite.rollout.vllm_rollout:VLLMRollout",
        _installed("vllm"),
        vllm_memory,
        "run `make install` (VLLM=cpu or VLLM=cuda)",
    )
)
ROLLOUTS.register(Backend("hf", "verl_lite.rollout.hf_rollout:HFRollout", lambda: True, hf_memory))


def resolve_rollout_name(name: str) -> str:
    """The one place `auto` is resolved: vllm where it is installed, else hf; other names are kept."""
    return ROLLOUTS.resolve(name)


def vllm_available() -> bool:
    return ROLLOUTS.get("vllm").is_available()


def build_rollout(name: str, model_cfg, rollout_cfg, tokenizer, rank: int):
    """The rollout backend `name` (already resolved) for this rank: a base.Rollout."""
    return ROLLOUTS.get(name).load()(model_cfg, rollout_cfg, tokenizer, rank)
