"""The vLLM rollout's sleep decisions (vllm_sleep.py) and the worker's sync policy
(weight_sync.RolloutWeights), step by step through a training run.

vLLM has no sleep mode on CPU, so the engine here is a recorder of the calls the rollout would make
(`LLM.sleep`, `LLM.wake_up`, the weight load, `LLM.generate`); the decisions -- which level, which
tags in which order, when the worker must sync, when the memory is released -- are the real code:
EngineMemory, Rollout.needs_sync and RolloutWeights, driven the way VLLMRollout and the worker drive
them.
"""

import pytest

from verl_lite.rollout.base import Rollout
from verl_lite.rollout.vllm_sleep import EngineMemory
from verl_lite.rollout.weight_sync import RolloutWeights


class RecordingRollout(Rollout):
    """VLLMRollout's memory handling around a recorder instead of an engine."""

    def __init__(self, sleep_enabled: bool, keep_weights: bool = False):
        super().__init__(seed=0, rank=0)
        self.memory = EngineMemory(sleep_enabled, keep_weights)
        self.log: list = []
        self._run(self.memory.sleep())  # as after LLM(...)

    @property
    def weights_loaded(self) -> bool:
        return self.memory.weights_valid

    def _run(self, calls):
        self.log += [(method, kwargs.get("level", kwargs.get("tags"))) for method, kwargs in calls]

    def release(self):
        self._run(self.memory.sleep())

    def update_weights(self, named_tensors):
        self._run(self.memory.before_sync())
        self.log.append(("load_weights", None))
        self.memory.after_sync()
        return {}

    def update_adapter(self, tensors, config):
        self._run(self.memory.before_sync())
        self.log.append(("load_adapter", None))
        return {}

    def generate_tokens(self, prompt_ids, prompt_mask, params):
        self._run(self.memory.before_generate())
        self.log.append(("generate", None))
        return None, None

    def generate_requests(self, requests, call):  # a multi-turn turn: wake, generate, no sleep
        self._run(self.memory.before_generate())
        self.log.append(("generate", None))
        return [], bool(requests)


def run(sleep_enabled: bool, phases: list[str], lora: bool = False) -> tuple[RecordingRollout, int]:
    """The worker's side, as ActorRolloutRefWorker drives RolloutWeights: before a generate, sync when
    due; after it, release unless the phase name ends in "+" (the driver said another generate comes
    next); "update_actor" releases first and moves the actor. With `lora` the sync is
    weight_sync.AdapterSync's: the base only while the engine lacks it, then the adapter, and the
    engine keeps its weights through sleeps (VLLMRollout's choice with LoRA)."""
    rollout = RecordingRollout(sleep_enabled, keep_weights=lora)
    weights = RolloutWeights(rollout)
    for phase in phases:
        if phase == "update_actor":
            weights.before_engine_phase()
            weights.actor_moved()
            continue
        if weights.sync_due() or (lora and weights.num_syncs == 0):  # LoRA: no adapter yet
            if not lora or not rollout.weights_loaded:
                rollout.update_weights([])
            if lora:
                rollout.update_adapter({}, {})
            weights.synced()
        rollout.generate_tokens(None, None, None)
        weights.after_generate(phase.endswith("+"))
    return rollout, weights.num_syncs


# validation at step 0 (the driver: the step's generate comes next), step 1 with ReMax (a greedy
# baseline right after the rollout), step 2 with validation after its update
PHASES = ["validate+", "gen+", "gen_max", "update_actor", "gen", "update_actor", "validate+", "gen"]
# the same with a reward model scoring between generates: the driver never says another follows
WITH_REWARD_MODEL = [p.rstrip("+") for p in PHASES]


def test_on_gpu_rollouts_without_an_update_between_share_one_wake_up_and_one_sync():
    rollout, syncs = run(True, PHASES)
    assert ("sleep", 1) not in rollout.log, "level 1 would copy the weights to the host and back"
    assert rollout.log[:7] == [
        ("sleep", 2),  # after start-up: the dummy weights and the KV cache leave the device
        ("wake_up", ["weights"]),  # room for the sync's writes ...
        ("load_weights", None),
        ("wake_up", ["kv_cache"]),  # ... and only then the KV cache, to generate
        ("generate", None),  # validation at step 0: the engine stays awake ...
        ("generate", None),  # ... for step 1's rollout: no sync, no wake-up
        ("generate", None),  # ReMax's greedy baseline, likewise
    ]
    assert syncs == 3, "the first sync (dummy weights), then one per update; nothing else re-syncs"
    assert [m for m, _ in rollout.log].count("load_weights") == syncs
    generates = [i for i, (m, _) in enumerate(rollout.log) if m == "generate"]
    assert len(generates) == 6
    assert rollout.log[generates[2] + 1] == ("sleep", 2), "after the baseline the update needs the device"
    # step 2's validation after its update syncs once, and step 3's rollout reuses the awake engine
    assert rollout.log[-6:] == [
        ("wake_up", ["weights"]),
        ("load_weights", None),
        ("wake_up", ["kv_cache"]),
        ("generate", None),
        ("generate", None),
        ("sleep", 2),
    ]


def test_with_a_reward_model_between_rollouts_every_rollout_sleeps_and_resyncs():
    rollout, syncs = run(True, WITH_REWARD_MODEL)
    generates = [i for i, (m, _) in enumerate(rollout.log) if m == "generate"]
    assert len(generates) == 6 and syncs == 6, "level 2 discarded the weights after every rollout"
    for i in generates:
        assert rollout.log[i - 3 : i] == [
            ("wake_up", ["weights"]),
            ("load_weights", None),
            ("wake_up", ["kv_cache"]),
        ]
        assert rollout.log[i + 1] == ("sleep", 2)


def test_on_cpu_the_engine_stays_awake_and_syncs_only_after_updates():
    for phases in (PHASES, WITH_REWARD_MODEL):
        rollout, syncs = run(False, phases)
        assert [m for m, _ in rollout.log if m in ("sleep", "wake_up")] == []
        assert syncs == 3, "the first sync (dummy weights), then one per update"


def test_generating_on_discarded_weights_is_refused():
    memory = EngineMemory(sleep_enabled=True)
    memory.sleep()
    with pytest.raises(RuntimeError, match="without valid weights"):
        memory.before_generate()
    memory.before_sync()
    memory.after_sync()
    assert memory.before_generate() == [("wake_up", {"tags": ["kv_cache"]})]
    assert memory.before_generate() == [], "waking what is awake only makes vLLM warn: nothing to call"


def test_keep_weights_sleeps_at_level_1_and_the_weights_stay_valid():
    """For a caller that syncs only part of the weights (LoRA adapters over a base)."""
    memory = EngineMemory(sleep_enabled=True, keep_weights=True)
    memory.before_sync()
    memory.after_sync()
    memory.before_generate()
    assert memory.sleep() == [("sleep", {"level": 1})]
    assert memory.weights_valid, "level 1 copies the weights to the host and back"
    assert memory.before_generate() == [("wake_up", {"tags": ["weights", "kv_cache"]})]


def test_with_lora_the_base_goes_over_once_and_survives_every_sleep():
    rollout, syncs = run(True, WITH_REWARD_MODEL, lora=True)
    assert [m for m, _ in rollout.log].count("load_weights") == 1, "the base (dummy at start) once"
    assert ("sleep", 2) not in rollout.log, "level 2 would discard the base: a full sync every step"
    assert rollout.log[:7] == [
        ("sleep", 1),
        ("wake_up", ["weights"]),
        ("load_weights", None),
        ("load_adapter", None),
        ("wake_up", ["kv_cache"]),
        ("generate", None),
        ("sleep", 1),
    ]
    assert syncs == 3, "the first sync, then one adapter per update; gen_max and validation reuse it"


def test_a_multi_turn_rollout_wakes_once_and_sleeps_once_after_its_last_turn():
    """Each turn generates on the weights the first turn woke; only the end of the rollout sleeps
    (a sleep between turns would discard the weights mid-rollout)."""
    rollout = RecordingRollout(sleep_enabled=True)
    rollout.update_weights([])
    rollout.log.clear()
    for _ in range(3):
        rollout.generate_requests(["a request"], (1,))
    rollout.release()  # the worker's after_generate, after the rollout's last turn
    assert rollout.log == [
        ("wake_up", ["kv_cache"]),
        ("generate", None),
        ("generate", None),
        ("generate", None),
        ("sleep", 2),
    ]
    assert not rollout.weights_loaded
