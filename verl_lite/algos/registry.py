"""Name -> function registries, so config strings pick algorithms once, when things are built."""

from __future__ import annotations

from collections.abc import Callable


class Registry:
    def __init__(self, kind: str, config_key: str):
        self.kind, self.config_key = kind, config_key
        self._fns: dict[str, Callable] = {}

    def register(self, name: str) -> Callable[[Callable], Callable]:
        def deco(fn: Callable) -> Callable:
            if name in self._fns:
                raise ValueError(f"{self.kind} '{name}' registered twice")
            self._fns[name] = fn
            return fn

        return deco

    def get(self, name: str) -> Callable:
        if name not in self._fns:
            raise ValueError(
                f"{self.config_key}={name!r} is not a known {self.kind}; choose one of {sorted(self._fns)}"
            )
        return self._fns[name]

    def names(self) -> list[str]:
        return sorted(self._fns)


ADV_ESTIMATORS = Registry("advantage estimator", "algorithm.adv_estimator")
POLICY_LOSSES = Registry("policy loss", "actor_rollout_ref.actor.policy_loss.loss_mode")
