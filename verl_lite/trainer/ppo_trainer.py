"""RayPPOTrainer: the driver's training loop, one step as a list of named phases.

    gen           sync weights -> n responses per prompt          timing_s/gen
    gen_max       ReMax: greedy baseline responses and scores     timing_s/gen_max
    reward        rule scores (or the reward model's) on the last response token   timing_s/reward
    old_log_prob  the actor's (and, with a KL term, the reference's) log-probs of the sampled
                  tokens, one call; skipped when the update is exactly on-policy   timing_s/old_log_prob
    values        the critic's values (GAE only)                   timing_s/values
    kl_reward     KL penalty in the reward (use_kl_in_reward)     timing_s/kl_reward
    adv           advantages on the driver, pure tensors          timing_s/adv
    update_critic the critic's PPO epochs (GAE only)              timing_s/update_critic
    update_actor  PPO epochs over mini-batches (after critic_warmup steps)   timing_s/update_actor
    (then, every test_freq / save_freq steps: testing, save_checkpoint)

Which phases run is decided once, when the trainer is built; the step loop just walks the list.
The algorithm-specific phases live in ppo_phases.py, building the worker groups in worker_setup.py,
the checkpoint across roles in trainer_checkpoint.py, and starting Ray in ray_start.py.

No pass is run twice and no two calls go where one does: when nothing before the update reads the
old log-probs, there is no old_log_prob phase: update_actor takes the first mini-batch's from its
own forward (nothing has moved the weights yet), computes the other rows' in the same call before
any step, and returns them all (the rollout/actor log-prob diff is computed from those); the
reference's log-probs for the KL loss are computed in the same call too.
Otherwise the actor's and the reference's log-prob passes share one call. And the next step's
generate_sequences is queued on the workers behind this step's update_actor when nothing the
workers must see comes between them (rollout_prefetch.py): one driver round trip per step fewer.
A worker that fails or dies surfaces as a WorkerError naming the worker, its rank and method, and
here also the trainer phase and step. `fit` first resumes from a checkpoint when there is one
(trainer.resume_mode; the layout and atomic commit are in trainer/checkpoint.py).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager

import numpy as np

from verl_lite.agent_loop.metrics import compute_agent_loop_metrics
from verl_lite.algos import ADV_ESTIMATORS
from verl_lite.algos.kl_ctrl import build_kl_controller
from verl_lite.algos.rollout_corr import correction_enabled
from verl_lite.config.run import Run
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.data.rlhf_dataset import EpochSampler, RLHFDataset
from verl_lite.errors import RunError
from verl_lite.protocol import DataProto
from verl_lite.rollout.base import compute_logprob_diff_metrics
from verl_lite.single_controller import WorkerError
from verl_lite.trainer.batching import inverse_order
from verl_lite.trainer.dump import Generations, dump_jsonl, record_validation
from verl_lite.trainer.health import HealthMonitor, run_shape
from verl_lite.trainer.metrics import (
    compute_data_metrics,
    compute_throughput_metrics,
    compute_val_metrics,
    compute_variance_proxy_metrics,
    timer,
)
from verl_lite.trainer.ppo_phases import AlgorithmPhases, in_order
from verl_lite.trainer.rollout_inputs import rollout_inputs
from verl_lite.trainer.rollout_prefetch import QueuedRollout, peek_next_indices
from verl_lite.trainer.tracking import Tracking
from verl_lite.trainer.trainer_checkpoint import TrainerCheckpoint
from verl_lite.trainer.worker_setup import WorkerSetup

log = logging.getLogger(__name__)


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


class RayPPOTrainer(AlgorithmPhases, WorkerSetup, TrainerCheckpoint):
    def __init__(
        self,
        config: PPOTrainerConfig,
        run: Run,
        train_dataset: RLHFDataset,
        val_dataset: RLHFDataset | None,
        reward_fn,
        val_reward_fn,
        tokenizer=None,
    ):
        self.config, self.run, self.tokenizer = config, run, tokenizer
        self.train_dataset, self.val_dataset = train_dataset, val_dataset
        self.reward_fn, self.val_reward_fn = reward_fn, val_reward_fn
        t = config.trainer
        self.use_gpu, self.world_size, self.use_ref, self.use_critic = (
            run.use_gpu,
            run.world,
            run.ref,
            run.critic,
        )
        # prompts per generation batch: data.gen_batch_size (= train_batch_size unless DAPO draws more)
        self.sampler = EpochSampler(
            len(train_dataset), config.data.gen_batch_size, config.data.shuffle, config.data.seed
        )
        # resolved at start-up from the data (trainer/checks.resolve_training_steps)
        self.total_training_steps = config.actor_rollout_ref.actor.optim.total_training_steps
        alg = config.algorithm
        self.adv_spec = ADV_ESTIMATORS.spec(alg.adv_estimator)
        self.adv_kwargs = ADV_ESTIMATORS.read_keys(self.adv_spec, config)  # the keys the estimator reads
        self.kl_ctrl = None
        if alg.use_kl_in_reward:
            k = alg.kl_ctrl
            self.kl_ctrl = build_kl_controller(k.type, k.kl_coef, k.target_kl, k.horizon)
        self.critic_wg = self.rm_wg = None
        rollout = config.actor_rollout_ref.rollout
        self.rollout_correction = correction_enabled(alg.rollout_correction, rollout.calculate_log_probs)
        self.old_log_probs_in_update = self.update_makes_old_log_probs()
        self.phases = self.build_phases()
        # DAPO's next generation depends on this step's kept groups: no early queueing there
        self.prefetch_rollouts = not alg.filter_groups.enable
        self.queued_rollout: QueuedRollout | None = None
        self.num_prefetched_rollouts = 0
        self.keep_val_texts = bool(t.validation_data_dir or t.log_val_generations > 0)
        if (t.rollout_data_dir or self.keep_val_texts) and tokenizer is None:
            raise ValueError(
                "trainer.rollout_data_dir / validation_data_dir / log_val_generations need a tokenizer"
            )
        self.tracker: Tracking | None = None
        self.global_steps = 0
        self.resume_path = self.find_resume_path()

    def build_phases(self) -> list:
        """The step's phases in their fixed order: those every step runs, those the config asks for,
        and those the advantage estimator's spec names (e.g. ReMax's gen_max)."""
        alg, t = self.config.algorithm, self.config.trainer
        filtered = alg.filter_groups.enable
        available = {
            "gen": self._generate_filtered if filtered else self._generate,
            "gen_max": self._remax_baseline,
            "reward": self._reward,
            "old_log_prob": self._old_log_prob,
            "rollout_corr": self._rollout_corr,
            "values": self._values,
            "kl_reward": self._kl_in_reward,
            "adv": self._advantage,
            "update_critic": self._update_critic,
            "update_actor": self._update_actor,
            "dump_rollout_generations": self._dump_rollout,
        }
        wanted = {"gen", "adv", "update_actor", *self.adv_spec.phases}
        wanted |= {"old_log_prob"} if self.old_log_prob_phase() else set()  # (with the reference's)
        wanted |= {"rollout_corr"} if self.rollout_correction else set()
        wanted |= set() if filtered else {"reward"}  # dynamic sampling scores as it generates
        wanted |= {"values", "update_critic"} if self.use_critic else set()
        wanted |= {"kl_reward"} if alg.use_kl_in_reward else set()
        wanted |= {"dump_rollout_generations"} if t.rollout_data_dir else set()
        unknown = sorted(wanted - available.keys())
        if unknown:
            raise ValueError(
                f"algorithm.adv_estimator={alg.adv_estimator} asks for trainer phases {unknown}, which the "
                f"trainer does not have; it has {list(available)}"
            )
        return [(name, phase) for name, phase in available.items() if name in wanted]

    def reads_old_log_probs_before_update(self) -> bool:
        """KL in the reward, sum_pi_squared, or an estimator reads the old log-probs before the update."""
        a, alg = self.config.actor_rollout_ref.actor, self.config.algorithm
        return (
            alg.use_kl_in_reward
            or a.calculate_sum_pi_squared
            or bool({"old_log_probs", "sum_pi_squared"} & set(self.adv_spec.inputs))
        )

    def update_makes_old_log_probs(self) -> bool:
        """No phase before the update reads the old log-probs (above, or rollout correction's weights
        and rejection, or its bypass mode, where they are the rollout's): update_actor then makes
        them itself, the first mini-batch's from its own forward (exactly on-policy there: nothing
        has moved the weights yet) and the other rows' in a pass in the same call. With one
        mini-batch and one epoch that is all of them (verl's `on_policy`)."""
        return not self.reads_old_log_probs_before_update() and not self.rollout_correction

    def old_log_prob_phase(self) -> bool:
        """An old-log-prob pass before the update: unless the update makes them, or bypass mode takes
        the rollout's and nothing else (the reference's KL in the reward) needs the pass."""
        bypass = self.config.algorithm.rollout_correction.bypass_mode
        if bypass:
            return self.reads_old_log_probs_before_update()
        return not self.old_log_probs_in_update

    # --- the loop -----------------------------------------------------------------------------------
    def fit(self) -> dict[str, float]:
        t = self.config.trainer
        tracker = self.tracker = Tracking.from_config(self.config, self.total_training_steps)
        health = HealthMonitor(run_shape(self.config.actor_rollout_ref.actor, self.use_gpu))
        last_val: dict[str, float] = {}
        with trainer_phase("load_checkpoint", self.global_steps):
            self._load_checkpoint()
        if t.val_before_train and self.val_dataset is not None:
            last_val = self._validate_timed()
            tracker.log(last_val, step=self.global_steps)
            if t.val_only:  # verl: validate once, then stop
                tracker.finish()
                return last_val
        try:
            while self.global_steps < self.total_training_steps:
                for indices in self.sampler.epoch_batches():
                    self.global_steps += 1
                    metrics = self.train_step(self._step_batch(indices))
                    is_last = self.global_steps >= self.total_training_steps
                    if self._validates_after_step():
                        last_val = self._validate_timed()
                        metrics.update(last_val)
                    if self._saves_after_step():
                        metrics.update(self._save_checkpoint_timed())
                    tracker.log(metrics, step=self.global_steps)
                    for line in health.check(metrics):
                        log.info(line)
                    if is_last:
                        break
        except BaseException:
            self.finish_checkpoints(failing=True)  # the last good checkpoint is still published
            raise
        with trainer_phase("save_checkpoint", self.global_steps):
            self.finish_checkpoints()  # the last save's background commit
        tracker.finish()
        return last_val

    def _is_last_step(self) -> bool:
        return self.global_steps >= self.total_training_steps

    def _validates_after_step(self) -> bool:
        t = self.config.trainer
        return (
            self.val_dataset is not None
            and t.test_freq > 0
            and (self._is_last_step() or self.global_steps % t.test_freq == 0)
        )

    def _saves_after_step(self) -> bool:
        t = self.config.trainer
        return t.save_freq > 0 and (self._is_last_step() or self.global_steps % t.save_freq == 0)

    def _step_batch(self, indices: list[int]) -> DataProto:
        """The step's prompts: collated when its rollout was queued early, else now."""
        if self.queued_rollout is not None:
            return self.queued_rollout.batch_for(indices)
        return self.train_dataset.collate(indices)

    def _queue_next_rollout(self) -> None:
        """Submit the next step's generate_sequences behind the update just submitted, when nothing
        the workers must see comes between the two (rollout_prefetch.py)."""
        if not self.prefetch_rollouts or self._is_last_step():
            return
        if self._validates_after_step() or self._saves_after_step():
            return
        indices = peek_next_indices(self.sampler)
        batch = self.train_dataset.collate(indices)
        call = self.actor_rollout_wg.submit(
            "generate_sequences", self._rollout_inputs(batch, self.train_dataset)
        )
        self.queued_rollout = QueuedRollout(indices, batch, call)
        self.num_prefetched_rollouts += 1

    def train_step(self, batch: DataProto) -> dict[str, float]:
        metrics: dict[str, float] = {}
        timings: dict[str, float] = {}
        self._assign_uids(batch)
        with timer("step", timings):
            for name, phase in self.phases:
                with timer(name, timings), trainer_phase(name, self.global_steps):
                    batch = phase(batch, metrics)
        metrics.update(self._balance_metrics(batch))
        metrics.update(compute_data_metrics(batch, self.config.data.max_prompt_length, self.response_length))
        metrics.update(compute_agent_loop_metrics(batch))
        metrics.update({f"timing_s/{k}": v for k, v in timings.items()})
        metrics.update(compute_throughput_metrics(batch, timings["step"], self.world_size))
        metrics.update(compute_variance_proxy_metrics(batch, metrics.get("actor/grad_norm")))
        metrics["training/global_step"] = self.global_steps
        metrics["training/epoch"] = self.sampler.epoch
        return metrics

    def _rollout_inputs(self, batch: DataProto, dataset: RLHFDataset, meta_keys=None) -> DataProto:
        """The prompts for generate_sequences; with agent loops, the rows' fields (rollout_inputs.py)."""
        default = self.config.actor_rollout_ref.rollout.agent.default_agent_loop
        return rollout_inputs(batch, dataset, default, meta_keys)

    @property
    def response_length(self) -> int:
        return self.config.actor_rollout_ref.rollout.response_length

    # --- phases -------------------------------------------------------------------------------------
    def _generate(self, batch: DataProto, metrics: dict) -> DataProto:
        queued, self.queued_rollout = self.queued_rollout, None
        if queued is not None:  # queued behind the previous step's update, for this very batch
            gen = queued.result_for(batch)
        else:
            prompts = self._rollout_inputs(batch, self.train_dataset)
            prompts.meta_info["generate_follows"] = self._generate_follows_gen()
            gen = self.actor_rollout_wg.generate_sequences(prompts)
        metrics.update(gen.meta_info.pop("metrics", {}))
        n = self.config.actor_rollout_ref.rollout.n
        expanded = batch.repeat(n, interleave=True)
        for key in ("input_ids", "attention_mask", "position_ids"):
            expanded.batch.pop(key)
        return expanded.union(gen)

    def _keep_rollout(self, scores_between: bool, surely_generate: bool) -> bool:
        """Whether a generate's rollout may keep its device memory (and so its weights: no sync for
        the next generate): the driver's next call to the actor workers is another generate
        (`surely_generate`; otherwise possibly their own log-prob or update phase, which release it
        first, or a critic's, which must not find the device held) and no reward model scores on the
        device in between (`scores_between`)."""
        if scores_between and self.rm_wg is not None:
            return False
        return surely_generate or self.critic_wg is None

    def _generate_follows_gen(self) -> bool:
        """The gen phase's generate: DAPO may generate further batches after scoring these; ReMax's
        greedy baseline generates right after, before any scoring."""
        if self.config.algorithm.filter_groups.enable:
            return self._keep_rollout(scores_between=True, surely_generate=False)
        return any(name == "gen_max" for name, _ in self.phases)

    def _reward(self, batch: DataProto, metrics: dict) -> DataProto:
        self._score(batch, metrics)
        return batch

    def _old_log_prob(self, batch: DataProto, metrics: dict) -> DataProto:
        """old_log_probs (and ref_log_prob when the workers hold the reference), one call."""
        inputs = self._model_inputs(batch)
        batch = batch.union(self._forward_dispatch(self.actor_rollout_wg.compute_log_probs, inputs))
        self._logprob_diff_metrics(batch, metrics)
        return batch

    @staticmethod
    def _logprob_diff_metrics(batch: DataProto, metrics: dict) -> None:
        if "rollout_log_probs" in batch.batch:  # the rollout ran the actor's current weights?
            b = batch.batch
            metrics.update(
                compute_logprob_diff_metrics(b["rollout_log_probs"], b["old_log_probs"], b["response_mask"])
            )

    def _advantage(self, batch: DataProto, metrics: dict) -> DataProto:
        inputs = {  # the batch tensors the estimator's spec names; "index" is the group ids
            name: batch.non_tensor_batch["uid"] if name == "index" else batch.batch[name]
            for name in self.adv_spec.inputs
        }
        advantages, returns = self.adv_spec.fn(
            token_level_rewards=batch.batch["token_level_rewards"],
            response_mask=batch.batch["response_mask"],
            **inputs,
            **self.adv_kwargs,
        )
        batch.batch["advantages"], batch.batch["returns"] = advantages, returns
        return batch

    def _update_actor(self, batch: DataProto, metrics: dict) -> DataProto:
        if self.global_steps <= self.config.trainer.critic_warmup:
            return batch  # the first critic_warmup steps train only the critic
        cfg = self.config.actor_rollout_ref
        keys = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask", "advantages"]
        # without them the workers make old_log_probs (and ref_log_prob) in this call
        keys += [k for k in ("old_log_probs", "ref_log_prob", "rollout_is_weights") if k in batch.batch]
        if self.rollout_correction:  # the actor's rollout_corr/ metrics (and bypass mode's correction)
            keys.append("rollout_log_probs")
        data = batch.select(keys)
        mini_rows = cfg.actor.ppo_mini_batch_size * cfg.rollout.n
        order = self._dp_order(data, mini_rows)
        call = self.actor_rollout_wg.submit("update_actor", in_order(data, order))
        self._queue_next_rollout()
        out = call.result()
        metrics.update(out.meta_info["metrics"])
        if not self.old_log_probs_in_update:
            return batch
        batch = batch.union(in_order(out, inverse_order(order)))  # the rows back in place
        self._logprob_diff_metrics(batch, metrics)
        return batch

    def _dump_rollout(self, batch: DataProto, metrics: dict) -> DataProto:
        scores = batch.batch["token_level_scores"].sum(-1).tolist()
        gens = Generations.decode(self.tokenizer, batch, scores)
        dump_jsonl(gens, self.config.trainer.rollout_data_dir, self.global_steps)
        return batch

    @staticmethod
    def _model_inputs(batch: DataProto) -> DataProto:
        return batch.select(["input_ids", "attention_mask", "position_ids", "responses"])

    # --- after a step: checkpoint, validation ------------------------------------------------------
    def _save_checkpoint_timed(self) -> dict[str, float]:
        timings: dict[str, float] = {}
        with timer("save_checkpoint", timings), trainer_phase("save_checkpoint", self.global_steps):
            self._save_checkpoint()
        return {"timing_s/save_checkpoint": timings["save_checkpoint"]}

    def _validate_timed(self) -> dict[str, float]:
        timings: dict[str, float] = {}
        with timer("testing", timings), trainer_phase("testing", self.global_steps):
            metrics = self.validate()
        return metrics | {"timing_s/testing": timings["testing"]}

    def validate(self) -> dict[str, float]:
        """Greedy (val_kwargs) generation over the whole validation set; mean reward per data_source."""
        val_kwargs = self.config.actor_rollout_ref.rollout.val_kwargs
        size = len(self.val_dataset)
        batch_size = self.config.data.val_batch_size or size
        scores, sources, turns = [], [], []
        gens = Generations()
        for start in range(0, size, batch_size):
            batch = self.val_dataset.collate(list(range(start, min(start + batch_size, size))))
            prompts = self._rollout_inputs(batch, self.val_dataset, meta_keys=[])
            prompts.meta_info["validate"] = True
            # each batch is scored before the next; after the last, the actor workers' next call is the
            # next step's generate or their checkpoint save (the actor's comes first), or none
            prompts.meta_info["generate_follows"] = self._keep_rollout(True, surely_generate=True)
            padded, pad = prompts.pad_to_divisor(self.world_size)
            gen = self.actor_rollout_wg.generate_sequences(padded).unpad(pad * val_kwargs.n)
            expanded = batch.repeat(val_kwargs.n, interleave=True)
            expanded.batch = {}
            expanded.union(gen)
            rewards, extra = self._val_scores(expanded)
            scores += rewards.sum(-1).tolist()
            turns += list(expanded.non_tensor_batch.get("__num_turns__", []))
            sources += list(expanded.non_tensor_batch[self.config.data.reward_fn_key])
            if self.keep_val_texts:
                gens.extend(Generations.decode(self.tokenizer, expanded, rewards.sum(-1).tolist(), extra))
        if self.keep_val_texts:
            record_validation(gens, self.config.trainer, self.tracker, self.global_steps)
        metrics = compute_val_metrics(scores, sources, val_kwargs.n)
        if turns:  # verl's val-aux/num_turns/*
            metrics |= {
                f"val-aux/num_turns/{k}": float(f(turns))
                for k, f in (("min", min), ("max", max), ("mean", np.mean))
            }
        return metrics
