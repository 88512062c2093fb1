"""How the actor's weights reach its rollout in the hybrid engine, chosen once when the worker is built.

  FullSync     every sync gathers all of the actor's weights, one tensor at a time, into the rollout.
  AdapterSync  LoRA: the frozen base reaches the rollout once -- read from model.path at start-up (the
               HF rollout; vLLM with load_format auto/safetensors) or in the first sync (vLLM's
               load_format=dummy) -- and each later sync sends only the adapter: rank x (in + out)
               numbers per adapted layer instead of in x out.
  MergedSync   LoRA with verl 0.9's model.lora.merge: every sync sends all the weights under HF's
               names, each adapted layer's as W + alpha/r * B A (engine/lora.merged_weight); the
               rollout serves them as a plain model (no vLLM LoRA: any target module, full speed).

Weights are gathered a bucket of shards per collective (rollout.update_weights_bucket_megabytes),
the full weights already cast to the rollout's dtype (engine/weight_gather.py); the adapter keeps
the master dtype.

When a sync is due is `RolloutWeights`' call: the actor's weights carry a version (moved by every
update and checkpoint load), the rollout remembers the version it was synced to, and the backend says
whether it still holds them (`Rollout.weights_loaded`: vLLM asleep at level 2 has discarded them).
A rollout no update preceded (validation at step 0, ReMax's greedy baseline, DAPO's extra batches)
therefore syncs nothing as long as the backend kept its weights: the worker releases the rollout's
device memory (`Rollout.release`: vLLM's sleep) after a generate unless the driver says another
generate on the same workers comes next, and before any other phase of its own.

A sync returns the rollout's stats (update_weights_gb: bytes handed to the rollout in GiB), which
the worker reports as perf/update_weights_gb: with LoRA it falls from the model's size to the
adapter's after the first step; update_weights_collectives counts the gathers. Every rank calls a
sync together: the gathers are collectives.
"""

from __future__ import annotations

import itertools

import torch

from verl_lite.engine.lora import (
    adapter_config_dict,
    adapter_file_state,
    base_param_name,
    lora_layers,
    merged_weight,
)


class _Sync:
    def __init__(self, engine, rollout, bucket_bytes: int | None = None, dtype: torch.dtype | None = None):
        self.engine, self.rollout = engine, rollout
        self.bucket_bytes, self.dtype = bucket_bytes, dtype

    def _gather(self, select=None, dtype=None, stats=None):
        return self.engine.iter_full_params(select, bucket_bytes=self.bucket_bytes, dtype=dtype, stats=stats)


class FullSync(_Sync):
    def __call__(self) -> dict[str, float]:
        gathered: dict = {}
        stats = self.rollout.update_weights(self._gather(dtype=self.dtype, stats=gathered))
        return {**stats, "update_weights_collectives": gathered.get("collectives", 0)}


class AdapterSync(_Sync):
    def __init__(self, engine, rollout, bucket_bytes: int | None = None, dtype: torch.dtype | None = None):
        super().__init__(engine, rollout, bucket_bytes, dtype)
        self.config = adapter_config_dict(engine.lora_config)

    def __call__(self) -> dict[str, float]:
        base_gb, gathered, frozen = 0.0, {}, self.engine.frozen_names
        if not self.rollout.weights_loaded:  # once: the rollout started without weights
            base = self._gather(frozen.__contains__, self.dtype, gathered)
            base_gb = self.rollout.update_weights((base_param_name(n), t) for n, t in base)[
                "update_weights_gb"
            ]
        tensors = self._gather(lambda n: n not in frozen, stats=gathered)
        stats = self.rollout.update_adapter(adapter_file_state(self.engine.module, tensors), self.config)
        return {
            **stats,
            "base_sent": float(base_gb > 0),  # the base is checked too (rollout/weight_check.py)
            "update_weights_gb": base_gb + stats["update_weights_gb"],
            "update_weights_collectives": gathered.get("collectives", 0),
        }


class MergedSync(_Sync):
    def __init__(self, engine, rollout, bucket_bytes: int | None = None, dtype: torch.dtype | None = None):
        super().__init__(engine, rollout, bucket_bytes, dtype)
        self.layers = lora_layers(engine.module)  # {W: (A, B, scale)}
        self.parts = {n: w for w, (a, b, _) in self.layers.items() for n in (w, a, b)}

    def __call__(self) -> dict[str, float]:
        gathered: dict = {}
        stats = self.rollout.update_weights(self._merged(gathered))
        return {**stats, "update_weights_collectives": gathered.get("collectives", 0)}

    def _merged(self, gathered: dict):
        """Every weight in the module's order, so the engine gets each layer's parts together (vLLM's
        layer-wise reload holds a fused layer's parts until all have come): runs of plain weights cast
        before their gather, runs of adapted layers' W, A, B in the master dtype, each layer's
        W + scale * B A merged (at least float32) and cast once its three parts are in. One phase: an
        offloaded actor's params come in and go out once per sync."""
        names = [n for n, _ in self.engine.module.named_parameters()]
        held: dict[str, torch.Tensor] = {}
        with self.engine.phase("gather_weights"):
            for adapted, run in itertools.groupby(names, key=self.parts.__contains__):
                selected = set(run).__contains__
                if not adapted:
                    yield from (
                        (base_param_name(n), t) for n, t in self._gather(selected, self.dtype, gathered)
                    )
                    continue
                for name, t in self._gather(selected, stats=gathered):
                    held[name] = t
                    w = self.parts[name]
                    a, b, scale = self.layers[w]
                    if w in held and a in held and b in held:
                        dtype = self.dtype or held[w].dtype
                        merged = merged_weight(held.pop(w), held.pop(b), held.pop(a), scale)
                        yield base_param_name(w), merged.to(dtype)
        if held:
            raise RuntimeError(f"lora.merge: no complete adapted layer for {sorted(held)[:4]}")


class Outbox:
    """The separate rollout group's engine as the trainer's syncs see it (verl 0.9's separate_async:
    trainer/separate_async.py): FullSync, AdapterSync or MergedSync push into it as into an engine,
    and it keeps what they sent, on the host, for the rollout group to load (`take`). Every trainer
    rank iterates a sync together (the gathers are collectives); only `keep` ranks hold the tensors.
    `weights_loaded`: whether the group's engines hold base weights (a LoRA sync sends the base
    only when they do not)."""

    def __init__(self, keep: bool, weights_loaded: bool):
        self.keep, self.weights_loaded, self.sent = keep, weights_loaded, []

    def update_weights(self, named_tensors) -> dict[str, float]:
        tensors, size = [], 0
        for name, tensor in named_tensors:
            size += tensor.numel() * tensor.element_size()
            if self.keep:
                tensors.append((name, tensor.detach().to("cpu", copy=True)))
        self.sent.append(("weights", tensors))
        self.weights_loaded = True
        return {"update_weights_gb": size / 1024**3}

    def update_adapter(self, tensors: dict[str, torch.Tensor], config: dict) -> dict[str, float]:
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        kept = {k: t.detach().to("cpu", copy=True) for k, t in tensors.items()} if self.keep else {}
        self.sent.append(("adapter", kept, config))
        return {"update_weights_gb": size / 1024**3}

    def take(self) -> list:
        sent, self.sent = self.sent, []
        return sent


def deliver(sent: list, rollout) -> dict[str, float]:
    """What an Outbox kept, loaded into a rollout engine in the order it was sent."""
    gb = 0.0
    for item in sent:
        if item[0] == "weights":
            gb += rollout.update_weights(iter(item[1]))["update_weights_gb"]
        else:
            gb += rollout.update_adapter(item[1], item[2])["update_weights_gb"]
    return {"update_weights_gb": gb}


class RolloutWeights:
    """The actor's weights version, the one the rollout was synced to, and the rollout's device memory
    around them: the worker's whole policy, so it is tested without an engine (tests/rollout)."""

    def __init__(self, rollout, starts_synced: bool = True):
        """`starts_synced`: the rollout was built holding the actor's weights (from the same folder);
        not so where the actor merges a saved adapter into them (MergedSync from lora_adapter_path)."""
        self.rollout = rollout
        self.actor_version = 0
        self.synced_version = 0 if starts_synced else -1
        self.num_syncs = 0
        self.checked_version = self.checked_syncs = -1  # nothing checked yet (rollout/weight_check.py)

    def actor_moved(self) -> None:
        """An update (or a checkpoint load) changed the actor's weights."""
        self.actor_version += 1

    def sync_due(self) -> bool:
        """The rollout holds another version, or no valid weights (dummy at start, discarded by a sleep)."""
        return self.rollout.needs_sync(self.synced_version != self.actor_version)

    def synced(self) -> None:
        self.synced_version, self.num_syncs = self.actor_version, self.num_syncs + 1

    def check_due(self) -> bool:
        """Check the rollout's weights against the actor's: a sync was made since the last check, or
        the actor moved since then (a sync that should have been made and was not is caught too)."""
        return self.checked_syncs != self.num_syncs or self.checked_version != self.actor_version

    def checked(self) -> None:
        self.checked_version, self.checked_syncs = self.actor_version, self.num_syncs

    def after_generate(self, another_generate_follows: bool) -> None:
        """Release the rollout's device memory, unless the driver's next call here is another generate
        and nothing else uses the device before it: then the weights stay, and that generate needs no
        sync if the actor did not move."""
        if not another_generate_follows:
            self.rollout.release()

    def before_engine_phase(self) -> None:
        """A phase of the actor or reference needs the device: release what the rollout kept."""
        self.rollout.release()


def build_weight_sync(
    engine, rollout, bucket_bytes: int | None = None, dtype: torch.dtype | None = None, merge: bool = False
):
    """AdapterSync for an engine with LoRA adapters (MergedSync with `merge`: lora.merge), else
    FullSync; `bucket_bytes` of full weights per gather (None: one parameter each), full weights cast
    to `dtype` (None: the master dtype)."""
    kind = FullSync if engine.lora_config is None else MergedSync if merge else AdapterSync
    return kind(engine, rollout, bucket_bytes, dtype)
