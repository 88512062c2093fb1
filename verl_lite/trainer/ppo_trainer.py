"""RayPPOTrainer: the driver's training loop, one step as a list of named phases.

The trainer holds, each built with the state it needs and nothing more:

    workers       WorkerSet (worker_setup.py): builds the groups in the slots start-up reserved, and
                  shuts them down
    step_phases   StepPhases (ppo_phases.py): the step's phases, chosen once from the config
    checkpoint    TrainerCheckpoint (trainer_checkpoint.py): resume (vetted at start-up, before Ray),
                  save every save_freq steps with the background commit

It is built from the final, frozen config and what start-up loaded before Ray (TrainerInputs:
main_ppo.load_inputs), so nothing here decides or checks a value of the config.

and owns what runs across steps: the step count, the sampler, the KL controller and the schedule
(validate after test_freq steps: validation.py).
`fit` first resumes from a checkpoint when there is one (trainer.resume_mode; the layout and atomic
commit are in trainer/checkpoint.py), then runs each step's phases, validation and checkpoint.
A worker that fails or dies surfaces as a WorkerError naming the worker, its rank and method, and
here also the trainer phase and step. Starting Ray is ray_start.py's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

from verl_lite.agent_loop.metrics import FailingToolReport, compute_agent_loop_metrics
from verl_lite.algos.kl_ctrl import build_kl_controller
from verl_lite.config.common import prompts_per_draw, updates_per_step
from verl_lite.config.freeze import is_frozen
from verl_lite.config.run import Run
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.data.rlhf_dataset import EpochSampler, RLHFDataset
from verl_lite.errors import RunError
from verl_lite.protocol import DataProto
from verl_lite.single_controller import WorkerError
from verl_lite.trainer.health import HealthMonitor, run_shape
from verl_lite.trainer.metrics import (
    compute_data_metrics,
    compute_throughput_metrics,
    compute_variance_proxy_metrics,
    timer,
)
from verl_lite.trainer.ppo_phases import StepPhases
from verl_lite.trainer.tracking import Tracking
from verl_lite.trainer.trainer_checkpoint import TrainerCheckpoint
from verl_lite.trainer.validation import validate
from verl_lite.trainer.worker_setup import WorkerSet

log = logging.getLogger(__name__)


@dataclass
class TrainerInputs:
    """What start-up loads and checks before Ray, for the trainer (main_ppo.load_inputs)."""

    run: Run
    tokenizer: object
    train_dataset: RLHFDataset
    val_dataset: RLHFDataset | None
    reward_fn: Callable
    val_reward_fn: Callable
    checkpoint: TrainerCheckpoint  # the checkpoint to resume from, found and vetted


@contextmanager
def trainer_phase(name: str, step: int):
    """Name the trainer phase and step in a worker failure (the group names worker, rank, method) and
    in a driver-side failure of the run (RunError: the reward function)."""
    try:
        yield
    except WorkerError as e:
        raise WorkerError(f"trainer phase '{name}' at step {step} failed: {e}") from e
    except RunError as e:
        raise type(e)(f"trainer phase '{name}' at step {step} failed: {e}", e.detail) from e


class RayPPOTrainer:
    def __init__(self, config: PPOTrainerConfig, inputs: TrainerInputs, pool=None):
        """From the frozen config; `pool`: the workers' reserved slots (None: a trainer driven without
        Ray, whose phases tests call with workers of their own)."""
        if not is_frozen(config):
            raise RuntimeError("the trainer is built from the final, frozen config (preflight.finalize)")
        run, train_dataset, tokenizer = inputs.run, inputs.train_dataset, inputs.tokenizer
        self.config, self.run, self.tokenizer = config, run, tokenizer
        self.train_dataset, self.val_dataset = train_dataset, inputs.val_dataset
        self.val_reward_fn = inputs.val_reward_fn
        reward_fn = inputs.reward_fn
        alg = config.algorithm
        # prompts per generation batch: data.gen_batch_size (= train_batch_size unless DAPO draws more)
        self.sampler = EpochSampler(
            len(train_dataset), prompts_per_draw(config), config.data.shuffle, config.data.seed
        )
        # resolved at start-up from the data (trainer/checks.resolve_training_steps)
        optim_steps = config.actor_rollout_ref.actor.optim.total_training_steps
        self.total_training_steps = optim_steps // updates_per_step(config)
        self.kl_ctrl = None
        self.report_failing_tools = FailingToolReport()  # a tool failing in every call: said once
        if alg.use_kl_in_reward:
            k = alg.kl_ctrl
            self.kl_ctrl = build_kl_controller(k.type, k.kl_coef, k.target_kl, k.horizon)
        self.workers = WorkerSet(config, run, pool)
        # perf/throughput per device: separate_async's rollout group counts too (verl's)
        r = config.actor_rollout_ref.rollout
        self.throughput_devices = run.world + (r.nnodes * r.n_gpus_per_node if self.workers.separate else 0)
        self.step_phases = StepPhases(
            config,
            self.workers,
            train_dataset,
            self.sampler,
            reward_fn,
            self.kl_ctrl,
            tokenizer,
            self.quiet_after,
        )
        self.phases = self.step_phases.build_phases()
        self.checkpoint = inputs.checkpoint
        self.tracker: Tracking | None = None
        self.global_steps = 0

    # --- the verbs: set up, train, shut down ---------------------------------------------------------
    def init_workers(self) -> None:
        self.workers.init_workers()

    def shutdown(self) -> None:
        if self.step_phases.separate is not None:
            self.step_phases.separate.stop()
        self.workers.shutdown()
        self.checkpoint.discard_failed()  # a failed save's folder, once no worker writes into it

    def fit(self) -> dict[str, float]:
        t = self.config.trainer
        tracker = self.tracker = Tracking.from_config(self.config, self.total_training_steps)
        health = HealthMonitor(run_shape(self.config.actor_rollout_ref.actor, self.run.use_gpu))
        last_val: dict[str, float] = {}
        with trainer_phase("load_checkpoint", self.global_steps):
            self.global_steps = self.checkpoint.load(
                self.workers.checkpoint_wgs, self.sampler, self.kl_ctrl, self.step_phases.replay
            )
        if self.step_phases.separate is not None:  # separate_async: the rollout group's weights, its thread
            with trainer_phase("sync_rollout", self.global_steps):
                self.step_phases.separate.start(self.global_steps)
        if t.val_before_train and self.val_dataset is not None:
            last_val = self._timed("testing", self._validate)
            tracker.log(last_val, step=self.global_steps)
            if t.val_only:  # verl: validate once, then stop
                tracker.finish()
                return last_val
        try:
            while self.global_steps < self.total_training_steps:
                for indices in self.sampler.epoch_batches():
                    self.global_steps += 1
                    step = self.global_steps
                    metrics = self.train_step(self.step_phases.prompts(indices))
                    if self._validates_after(step):
                        last_val = self._timed("testing", self._validate)
                        metrics.update(last_val)
                    if self._saves_after(step):
                        metrics.update(self._timed("save_checkpoint", self._save))
                    tracker.log(metrics, step=step)
                    for line in health.check(metrics):
                        log.info(line)
                    if self._is_last(step):
                        break
        except BaseException:
            self.checkpoint.finish(failing=True)  # the last good checkpoint is still published
            raise
        with trainer_phase("save_checkpoint", self.global_steps):
            self.checkpoint.finish()  # the last save's background commit
        tracker.finish()
        return last_val

    def train_step(self, batch: DataProto) -> dict[str, float]:
        metrics: dict[str, float] = {}
        timings: dict[str, float] = {}
        self.step_phases.step = self.global_steps
        self.step_phases.assign_uids(batch)
        with timer("step", timings):
            for name, phase in self.phases:
                with timer(name, timings), trainer_phase(name, self.global_steps):
                    batch = phase(batch, metrics)
        response_length = self.config.actor_rollout_ref.rollout.response_length
        metrics.update(self.step_phases.dispatch.balance_metrics(batch))
        metrics.update(compute_data_metrics(batch, self.config.data.max_prompt_length, response_length))
        metrics.update(compute_agent_loop_metrics(batch))
        self.report_failing_tools(batch, self.global_steps)
        metrics.update({f"timing_s/{k}": v for k, v in timings.items()})
        metrics.update(compute_throughput_metrics(batch, timings["step"], self.throughput_devices))
        metrics.update(compute_variance_proxy_metrics(batch, metrics.get("actor/grad_norm")))
        metrics["training/global_step"] = self.global_steps
        metrics["training/epoch"] = self.sampler.epoch
        return metrics

    # --- after a step: the schedule, validation, checkpoint ------------------------------------------
    def _is_last(self, step: int) -> bool:
        return step >= self.total_training_steps

    def _validates_after(self, step: int) -> bool:
        t = self.config.trainer
        return (
            self.val_dataset is not None
            and t.test_freq > 0
            and (self._is_last(step) or step % t.test_freq == 0)
        )

    def _saves_after(self, step: int) -> bool:
        t = self.config.trainer
        return t.save_freq > 0 and (self._is_last(step) or step % t.save_freq == 0)

    def quiet_after(self, step: int) -> bool:
        """Nothing the workers must see between this step's update and the next step's rollout (no
        validation, checkpoint or end of the run): the rollout may be queued early."""
        return not (self._is_last(step) or self._validates_after(step) or self._saves_after(step))

    def _timed(self, name: str, fn: Callable[[], dict | None]) -> dict[str, float]:
        timings: dict[str, float] = {}
        with timer(name, timings), trainer_phase(name, self.global_steps):
            metrics = fn() or {}
        return metrics | {f"timing_s/{name}": timings[name]}

    def _validate(self) -> dict[str, float]:
        args = (self.val_dataset, self.val_reward_fn, self.tokenizer, self.global_steps, self.tracker)
        return validate(self.config, self.workers, *args)

    def _save(self) -> None:
        wgs, replay = self.workers.checkpoint_wgs, self.step_phases.replay
        self.checkpoint.save(self.global_steps, wgs, self.sampler, self.kl_ctrl, replay)

    # --- its parts' state, as callers read it ---------------------------------------------------------
    resume_path = property(lambda self: self.checkpoint.resume_path)
    actor_rollout_wg = property(lambda self: self.workers.actor_rollout_wg)
    num_prefetched_rollouts = property(lambda self: self.step_phases.num_prefetched_rollouts)
    prefetch_rollouts = property(
        lambda self: self.step_phases.prefetch_rollouts,
        lambda self, value: setattr(self.step_phases, "prefetch_rollouts", value),
    )
