"""How the actor's weights reach its rollout in the hybrid engine, chosen once when the worker is built.

  FullSync     every sync gathers all of the actor's weights, one tensor at a time, into the rollout.
  AdapterSync  LoRA: the frozen base reaches the rollout once -- read from model.path at start-up (the
               HF rollout; vLLM with load_format auto/safetensors) or in the first sync (vLLM's
               load_format=dummy) -- and each later sync sends only the adapter: rank x (in + out)
               numbers per adapted layer instead of in x out.

A sync returns the rollout's stats (update_weights_gb: bytes handed to the rollout in GiB), which
the worker reports as perf/update_weights_gb: with LoRA it falls from the model's size to the
adapter's after the first step. Every rank calls a sync together: the gathers are collectives.
"""

from __future__ import annotations

from verl_lite.engine.lora import adapter_config_dict, adapter_file_state, base_param_name


class FullSync:
    def __init__(self, engine, rollout):
        self.engine, self.rollout = engine, rollout

    def __call__(self) -> dict[str, float]:
        return self.rollout.update_weights(self.engine.iter_full_params())


class AdapterSync:
    def __init__(self, engine, rollout):
        self.engine, self.rollout = engine, rollout
        self.config = adapter_config_dict(engine.lora_config)

    def _base(self):
        frozen = self.engine.frozen_names
        return ((base_param_name(n), t) for n, t in self.engine.iter_full_params(frozen.__contains__))

    def __call__(self) -> dict[str, float]:
        base_gb = 0.0
        if not self.rollout.weights_loaded:  # once: the rollout started without weights
            base_gb = self.rollout.update_weights(self._base())["update_weights_gb"]
        frozen = self.engine.frozen_names
        tensors = self.engine.iter_full_params(lambda n: n not in frozen)
        stats = self.rollout.update_adapter(adapter_file_state(self.engine.module, tensors), self.config)
        return {**stats, "update_weights_gb": base_gb + stats["update_weights_gb"]}


def build_weight_sync(engine, rollout):
    """AdapterSync for an engine with LoRA adapters, else FullSync."""
    return FullSync(engine, rollout) if engine.lora_config is None else AdapterSync(engine, rollout)
