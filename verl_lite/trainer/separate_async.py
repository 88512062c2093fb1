"""verl 0.9's separate_async trainer mode: a rollout group of its own generates while the trainer trains.

With `trainer.use_v1=True trainer.v1.trainer_mode=separate_async` the rollout runs on
`actor_rollout_ref.rollout.nnodes` x `n_gpus_per_node` workers of its own (workers/rollout_worker.py)
beside the trainer's (trainer.nnodes x n_gpus_per_node), as verl 0.9.1's PPOTrainerSeparateAsync:

  - prompts enter the replay buffer (trainer/replay_buffer.py) as in colocate_async:
    `separate_async.num_warmup_batches` batches before the first step, then each step's batch as it
    starts; stale finished groups are evicted and refilled by the same rules
    (trainer.v1.sampler.max_off_policy_threshold / max_off_policy_strategy);
  - a driver thread keeps the rollout group generating every unfinished trajectory in rounds
    (colocate_async.ROUNDS per response length) for as long as there is one, whatever the trainer
    does: the rollout never waits for an update, only for prompts (`separate_async/rollout_idle_s`);
  - a step takes the train_batch_size oldest finished groups (waiting for them: `timing_s/gen`) and
    runs the sync step's phases on them. train_batch_size = parameter_sync_step x ppo_mini_batch_size
    (verl's invariant, checked at start-up), so its update is parameter_sync_step local updates, one
    per mini-batch, in verl's order (each mini-batch's ppo_epochs, then the next; the LR schedule
    advances per local update over total_training_steps x parameter_sync_step), all against the
    old log-probs of the weights the step started with (verl's decoupled PPO);
  - after the update the actor's weights go to the rollout group (the `sync_rollout` phase): gathered
    on the trainer ranks as a hybrid-engine sync gathers them (LoRA: the adapter), through Ray's
    object store, loaded by every rollout rank between two rounds -- a trajectory in the middle of
    its response continues on the new weights (partial rollout) -- and checked where they landed
    against the trainer's fingerprints (rollout/weight_check.py): a sync that did not arrive stops
    the run with one line naming the parameter. The first sync (at the start, or after a resume)
    covers every weight.

Model versions count steps, as in colocate_async (the weights of step s are version s - 1), so
verl's staleness metrics read the same. Checkpoints keep the replay buffer as colocate_async's do.
verl's `hybrid_rollout` switch (lending the trainer's devices to the rollout while it would idle) is
refused at start-up. The trainer's workers hold no rollout in this mode: validation generates on the
rollout group, between two rounds (RayWorkerGroup's calls reach every rank in one order).
"""

from __future__ import annotations

import logging
import threading
import time

from verl_lite.errors import RunError
from verl_lite.rollout.weight_check import WeightSyncMismatch, compare
from verl_lite.trainer.colocate_async import ColocateAsync

log = logging.getLogger(__name__)


class SeparateAsync(ColocateAsync):
    """The gen phase of separate_async: the replay buffer, filled by the rollout group's thread."""

    mode = "separate_async"

    def __init__(self, config, workers, dataset, sampler, tokenizer):
        super().__init__(config, workers, dataset, sampler, tokenizer)
        self.warmup_batches = config.trainer.v1.separate_async.num_warmup_batches
        self.backend = config.actor_rollout_ref.rollout.name
        self.cond = threading.Condition()
        self.thread: threading.Thread | None = None
        self.stopping, self.error = False, None
        self.version = 0  # the weights the rollout group holds (steps whose update they include)
        self.pending = None  # (sent, base, adapter, version): weights for the group, loaded between rounds
        self.loaded: dict | None = None  # the group's answer to the last load, for the check
        self.weights_loaded = True
        self.holds_weights = (
            False  # no round before the first load: the group's own weights are not the trainer's
        )
        self.num_syncs, self.warned = 0, {}
        self.counters = {"rounds": 0, "rollout_idle_s": 0.0, "generate_s": 0.0}

    # --- the rollout thread ---------------------------------------------------------------------------
    def start(self, step: int) -> None:
        """Before the first step (after a resume, at its step): the trainer's weights to the group,
        checked, then the thread that keeps it generating."""
        self.weights_loaded = all(i["weights_loaded"] for i in self.workers.rollout_info)
        self.version = step
        self.thread = threading.Thread(target=self._generate_forever, name="separate_async", daemon=True)
        self.thread.start()
        checked: dict = {}
        self.push_weights(step, checked)
        log.info(
            "separate_async: the rollout group holds the trainer's weights of step %d (%d parameters "
            "verified where they landed, %d unverified)",
            step,
            checked["perf/weight_sync_verified_params"],
            checked["perf/weight_sync_unverified_params"],
        )

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        if self.thread is not None:
            self.thread.join(timeout=60)

    def _generate_forever(self) -> None:
        group = self.workers.rollout_wg
        try:
            while True:
                with self.cond:
                    idle = time.perf_counter()
                    while not self.stopping and self.pending is None and not self._has_work():
                        self.cond.wait()
                    self.counters["rollout_idle_s"] += time.perf_counter() - idle
                    if self.stopping:
                        return
                    pending, self.pending = self.pending, None
                    if pending is None:  # the round's requests, planned under the lock (keys, tokens)
                        per_rank, placed = self._plan_round(group.world_size, self.buffer.unfinished())
                    version = self.version
                if pending is not None:
                    sent, base, adapter, new_version = pending
                    answers = group.load_weights(sent, base, adapter)
                    with self.cond:
                        self.version, self.loaded = new_version, {"answers": answers, "base": base}
                        self.holds_weights = True
                        self.cond.notify_all()
                    continue
                out = getattr(group, self.round_method)(per_rank)
                with self.cond:
                    self._apply_round(out, placed, version)
                    self.counters["rounds"] += 1
                    self.counters["generate_s"] += max(o["metrics"]["timing_s/generate_local"] for o in out)
                    self.cond.notify_all()
        except BaseException as e:  # the trainer's thread raises it at its next wait
            with self.cond:
                self.error = e
                self.cond.notify_all()

    def _has_work(self) -> bool:
        return self.holds_weights and bool(self.buffer.unfinished())

    def _wait(self, until) -> None:
        """Wait on the rollout thread until `until()` (under the lock); its failure raised here."""
        while not until():
            if self.error is not None:
                raise RunError(f"separate_async: the rollout group failed: {self.error}") from self.error
            if not self.thread.is_alive():
                raise RunError("separate_async: the rollout thread stopped")
            self.cond.wait(timeout=1.0)

    # --- the gen phase --------------------------------------------------------------------------------
    def generate(self, batch, step: int, metrics: dict):
        """This step's prompts join the buffer; the train_batch_size oldest finished groups, once there."""
        with self.cond:
            self._submit_step(batch, step)
            self.cond.notify_all()
            evicted, filtered, failed, waited = [], [0], [0], time.perf_counter()

            def ready() -> bool:
                refilled = self._refill_stale(step, evicted) | self._refill_failed(step, failed)
                if refilled | self._refill_filtered(step, filtered):
                    self.cond.notify_all()  # the refills are the thread's to generate
                return self._batch_ready(step)

            self._wait(ready)
            groups = self.buffer.take(self.batch_size)
            metrics["separate_async/trainer_wait_s"] = time.perf_counter() - waited
            self._metrics(groups, evicted, step, metrics, filtered[0], failed[0])
            metrics.update(self._take_engine_calls())
            counters = dict(self.counters)
            self.counters = {k: 0 * v for k, v in self.counters.items()}
        metrics["separate_async/rounds"] = counters["rounds"]
        metrics["separate_async/rollout_idle_s"] = counters["rollout_idle_s"]
        metrics["timing_s/generate_local"] = counters["generate_s"]
        return self._batch(groups, metrics)

    # --- weights ----------------------------------------------------------------------------------------
    def push_weights(self, version: int, metrics: dict) -> None:
        """The actor's weights to the rollout group, loaded between two rounds, then checked."""
        wait = time.perf_counter()
        exported = self.workers.actor_rollout_wg.export_weights(self.weights_loaded)
        first = exported[0]
        sent = first["sent"]  # a reference into Ray's object store: no copy on the driver
        with self.cond:
            self.loaded, self.pending = None, (sent, first["base"], first["adapter"], version)
            self.cond.notify_all()
            self._wait(lambda: self.loaded is not None)
            answers = self.loaded["answers"]
        self.weights_loaded = True
        self.num_syncs += 1
        landed = answers[0]["landed"]
        expected = self.workers.actor_rollout_wg.expected_weights(landed, first["base"], first["adapter"])[0]
        checked: dict[str, float] = {}
        for rank, answer in enumerate(answers):
            where = f"{self.backend} rollout group, rank {rank}"
            if set(answer["landed"]) != set(landed):  # every rank's engine holds what rank 0's does
                missing = sorted(set(landed) ^ set(answer["landed"]))
                raise WeightSyncMismatch(
                    f"weight sync {self.num_syncs} (actor version {version}, {where}) did not arrive alike on "
                    f"every rank: rank {rank} reports {len(answer['landed'])} parameters, rank 0 {len(landed)} "
                    f"({', '.join(missing[:4])} differ); every rollout rank must hold the same weights"
                )
            said = self.warned.setdefault(rank, set())
            mine = compare(answer["landed"], expected, self.num_syncs, version, where, said)
            for key, value in mine.items():  # the worst rank's counts
                worse = min if key.endswith("/weight_sync_verified_params") else max
                checked[key] = worse(checked.get(key, value), value)
        metrics.update(first["metrics"])
        metrics.update(answers[0]["metrics"])
        metrics.update(checked)
        metrics["separate_async/weight_sync_s"] = time.perf_counter() - wait

    # --- checkpoints ----------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        with self.cond:
            return super().state_dict()
