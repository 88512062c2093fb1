"""When the vLLM engine sleeps and wakes around each rollout, and at which level (GPU only).

vLLM 0.32's sleep mode (`enable_sleep_mode=True`, its CuMem allocator; not on CPU) releases the
engine's device memory under two tags, "weights" and "kv_cache". `LLM.sleep(level)` pauses the
scheduler, drops the prefix cache and releases both: level 1 first copies the weights into
pinned host memory, level 2 discards them (vLLM keeps only the model's buffers -- rotary tables,
attention scales -- on the host and restores them on waking). `LLM.wake_up(tags)` maps a tag's
memory back (restoring a level-1 copy); the scheduler resumes once no tag is asleep. Waking a tag
that is awake only logs a warning, so the bookkeeping here wakes only what sleeps.

Level 2, always. After an update the next thing is a weight sync that overwrites every weight, so
level 1's copy to the host and back would move the whole model twice over the host link per rank
and pin a host copy of it, for nothing. When rollouts follow each other with no update between
(ReMax's greedy baseline, validation batches and the step after validation, dynamic sampling's
further batches) the engine does not sleep between them at all (the worker calls `sleep` only when
the driver says no generate comes next: rollout/weight_sync.RolloutWeights), so the weights stay valid
and no sync is made. Where something else needs the device between two rollouts (a reward model or
critic in its own process) the engine sleeps, the weights are marked invalid and the worker syncs
them again from the actor, which still holds them: a device-side all-gather instead of the host
round trip.

Order around a rollout: wake the weights, sync into them (the KV cache is still released, so the
gather has that room), wake the KV cache, generate, sleep.

`keep_weights=True` sleeps at level 1 instead, for a caller that syncs only part of the weights
each step (LoRA adapters: the base weights must survive the sleep; verl does the same); the
weights then stay valid through the sleep.
"""

from __future__ import annotations

DISCARD, KEEP = 2, 1  # vLLM's sleep levels: weights discarded / copied to the host
Call = tuple[str, dict]  # (LLM method, its keyword arguments)


class EngineMemory:
    """Which sleep/wake calls to make, and whether the engine's weights are valid (pure bookkeeping)."""

    def __init__(self, sleep_enabled: bool, keep_weights: bool = False):
        self.sleep_enabled = sleep_enabled
        self.level = KEEP if keep_weights else DISCARD
        self.asleep: set[str] = set()
        self.weights_valid = False  # the engine starts from dummy weights

    def sleep(self) -> list[Call]:
        """After generating (and once after start-up): release the device memory."""
        if not self.sleep_enabled or self.asleep:
            return []
        self.asleep = {"weights", "kv_cache"}
        if self.level == DISCARD:
            self.weights_valid = False
        return [("sleep", {"level": self.level})]

    def wake(self, tags: tuple[str, ...]) -> list[Call]:
        """Wake the sleeping ones among `tags`, weights before the KV cache."""
        waking = [t for t in ("weights", "kv_cache") if t in tags and t in self.asleep]
        if not waking:
            return []
        self.asleep -= set(waking)
        return [("wake_up", {"tags": waking})]

    def before_sync(self) -> list[Call]:
        return self.wake(("weights",))

    def after_sync(self) -> None:
        self.weights_valid = True

    def before_generate(self) -> list[Call]:
        if not self.weights_valid:
            raise RuntimeError(
                "vLLM rollout: generate without valid weights (dummy at start, discarded by sleep); "
                "sync them first (the worker does when Rollout.needs_sync says so)"
            )
        return self.wake(("weights", "kv_cache"))
