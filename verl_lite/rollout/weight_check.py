"""Every weight sync verified: after a sync the engine's weights are read back where they landed and
compared with the trainer's, parameter by parameter, by a cheap fingerprint.

A sync that silently does not arrive is the worst failure of a hybrid engine or a separate rollout
group: the rollout samples from an old policy (or its dummy start), nothing crashes, and training
goes wrong slowly (verl's LoRA adapter that never reached the async rollout engine; TRL's sleep
mode that skipped syncs). So after every sync -- and whenever the actor moved since the last check,
so a sync that was never made is caught too -- `SyncCheck` compares:

  the engine side   `Rollout.landed_fingerprints(base, adapter)`: each of the engine's own
                    parameters as it holds it now (HF: its copy's parameters; vLLM: the model
                    runner's parameters, read on the engine's worker, each TP rank's share of
                    every value it holds added over its TP group (vllm_tp_layout.py), and vLLM's
                    LoRA manager's adapter tensors), with the sent names whose values it holds
                    (a fused qkv_proj: one entry for each of q, k and v), the dtype they landed
                    in and the scale applied on arrival (vLLM's LoRA B);
  the trainer side  the same parameters from the trainer's FSDP2 shards, cast to the dtype the
                    sync sent them in (the base: `sent_dtype`), then to that dtype, and scaled the
                    same way (engine/weight_fingerprint.py), summed over the parts.

The two are computed independently from where the weights live, not from the tensors a sync
passes along: a sync whose copy does nothing, an adapter loaded into a slot no request uses, or a
sync that was skipped all leave the engine's fingerprint at the old weights while the trainer's
moved, and the run stops with one line naming the parameter on both sides, the sync and the
backend. The cost is one pass over each side's weights in memory and one all-reduce of three
numbers per parameter (measured in docs/hybrid_engine.md), reported as
timing_s/weight_sync_verify. The check is always on: it has no key.

With LoRA the adapter is checked at every check and the frozen base when it was just sent; with
lora.merge every weight at every check, an adapted layer's as W + scale * B A on both sides.
Parameters the check cannot pair (an engine parameter fed by names the trainer does not have, or a
sent one no engine parameter is known to hold: vLLM's layer-wise reload on a CPU engine drops
packed weights without a fingerprint) are counted in perf/weight_sync_unverified_params and named once
on stderr, never silently.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from verl_lite.engine.lora import adapter_file_names, base_param_name, lora_layers
from verl_lite.engine.weight_fingerprint import agree, shard_fingerprints
from verl_lite.errors import RunError
from verl_lite.utils import device as dev


@dataclass(frozen=True)
class Landed:
    """One engine parameter as it holds it now."""

    fingerprint: torch.Tensor  # engine/weight_fingerprint.fingerprint of the engine's values
    dtype: torch.dtype  # what the sent values were cast to on arrival
    parts: tuple[str, ...]  # the sent names whose values it holds (several where vLLM fuses them)
    scale: float = 1.0  # multiplied in on arrival (vLLM's LoRA B: alpha / r)


class WeightSyncMismatch(RunError):
    """The rollout engine does not hold the weights the trainer has after a sync."""


class SyncCheck:
    """Compare the rollout engine's weights with the trainer's (every trainer rank calls together)."""

    def __init__(
        self, engine, rollout, backend: str, sent_dtype: torch.dtype | None = None, merged: bool = False
    ):
        """`sent_dtype`: the dtype a sync casts the base weights to on the way (weight_sync.py's
        `dtype`; None: the actor's own), which values keep when they land in a wider parameter.
        `merged`: LoRA with lora.merge (MergedSync): the engine holds W + scale * B A of each adapted
        layer, which the trainer side computes from its shards of W and B and the whole A."""
        self.engine, self.rollout, self.backend = engine, rollout, backend
        self.sent_dtype = sent_dtype
        self.renamed = engine.lora_config is not None  # PEFT's parameter names (base_param_name)
        self.lora = self.renamed and not merged  # the rollout serves the adapter
        self.merged = lora_layers(engine.module) if self.renamed and merged else {}
        live = [n for n, _ in engine.module.named_parameters()]
        frozen = engine.frozen_names if self.lora else set()
        self.adapter_names = (
            adapter_file_names(engine.module, [n for n in live if n not in frozen]) if self.lora else {}
        )
        folded = {n for a, b, _ in self.merged.values() for n in (a, b)}  # inside their layer's W
        self.base_names = {n for n in live if n not in self.adapter_names and n not in folded}
        self.warned: set[str] = set()

    def sent_name(self, name: str) -> str:
        """The name a sync sends the trainer's parameter `name` under (what the engine reports)."""
        if name in self.adapter_names:
            return self.adapter_names[name]
        return base_param_name(name) if self.renamed else name

    def __call__(self, base: bool, sync: int, version: int) -> dict[str, float]:
        """Check the adapter (LoRA) and, if `base`, the base weights (all of them without LoRA).
        `sync`: the number of syncs so far, `version`: the actor's updates so far (for the message)."""
        adapter, base = self.lora, base or not self.lora
        landed = self.rollout.landed_fingerprints(base=base, adapter=adapter)
        expected = self.expected(landed, base, adapter)
        return compare(landed, expected, sync, version, f"{self.backend} rollout", self.warned)

    def expected(self, landed: dict, base: bool, adapter: bool) -> Expected:
        """The trainer's side of a check, for the engine parameters `landed` describes (their forms:
        the fingerprints in it are not read), from the trainer's shards (every rank together)."""
        forms: dict[str, tuple[torch.dtype, float, torch.dtype | None]] = {}
        adapter_parts = set(self.adapter_names.values())
        for entry in landed.values():
            for part in entry.parts:  # the adapter travels in the actor's dtype (weight_sync.py)
                via = None if part in adapter_parts else self.sent_dtype
                forms.setdefault(part, (entry.dtype, entry.scale, via))
        # an offloaded actor's shards are brought in and taken out again, as the sync's gather does
        with self.engine.phase("verify_weights"):
            trainer = shard_fingerprints(
                self.engine.module, forms, self.sent_name, dev.local_device(), self.merged
            )
        selected = {
            self.sent_name(n)
            for n in (self.base_names if base else set()) | (set(self.adapter_names) if adapter else set())
        }
        return Expected(trainer, frozenset(selected))


@dataclass(frozen=True)
class Expected:
    """The trainer's side of a check: each sent name's fingerprint, and the names the check covers."""

    fingerprints: dict[str, torch.Tensor]
    selected: frozenset[str]


def compare(
    landed: dict, expected: Expected, sync: int, version: int, where: str, warned: set[str]
) -> dict[str, float]:
    """The engine's parameters (`landed`, read where they are) against the trainer's (`expected`):
    the first that differs stops the run (WeightSyncMismatch, one line); those that cannot be paired
    are counted and named once on stderr (`warned`: the names said already). `where`: the engine,
    for the message (e.g. 'vllm rollout')."""
    trainer = expected.fingerprints
    covered, unpaired, bad = set(), [], []
    for name, entry in landed.items():
        if not all(p in trainer for p in entry.parts):
            unpaired.append(name)
            continue
        covered.update(entry.parts)
        want = sum((trainer[p] for p in entry.parts), torch.zeros(3, dtype=torch.float64))
        if not agree(want, entry.fingerprint):
            bad.append((name, entry, want))
    unverified = sorted(set(unpaired) | (expected.selected - covered))
    if bad:
        name, entry, want = bad[0]
        parts = "+".join(entry.parts)
        raise WeightSyncMismatch(
            f"weight sync {sync} (actor version {version}, {where}) did not arrive: "
            f"the engine's {name} does not hold the trainer's {parts} "
            f"(sum {entry.fingerprint[0].item():.9g} vs {want[0].item():.9g}, "
            f"{len(bad)} of {len(landed)} parameters differ); the rollout would sample from stale "
            "weights -- check that every sync reaches the engine that serves the requests "
            "(Rollout.update_weights / update_adapter, a sleep that discarded them, the LoRA slot)"
        )
    new = [n for n in unverified if n not in warned]
    if new:
        warned.update(new)
        print(
            f"verl_lite: weight sync check ({where}): {len(new)} parameters cannot be paired "
            f"and are not verified: {', '.join(new[:8])}{' ...' if len(new) > 8 else ''}",
            file=sys.stderr,
        )
    return {
        "perf/weight_sync_verified_params": float(len(landed) - len(unpaired)),
        "perf/weight_sync_unverified_params": float(len(unverified)),
    }
