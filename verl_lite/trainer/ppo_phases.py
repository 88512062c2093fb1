"""StepPhases: the phases of one training step, each `phase(batch, metrics) -> batch`.

    gen           sync weights -> n responses per prompt          timing_s/gen
                  (DAPO's dynamic sampling when algorithm.filter_groups.enable: generate and score
                  batches, drop all-equal groups, until train_batch_size prompts are kept)
    gen_max       ReMax: greedy baseline responses and scores     timing_s/gen_max
    reward        rule scores (or the reward model's) on the last response token   timing_s/reward
    old_log_prob  the actor's (and, with a KL term, the reference's) log-probs of the sampled
                  tokens, one call; skipped when the update is exactly on-policy   timing_s/old_log_prob
    rollout_corr  algorithm.rollout_correction: IS weights and rejection against the rollout's log-probs
                  (decoupled), or the rollout's log-probs as the old ones (bypass mode)
    values        the critic's values (GAE only)                   timing_s/values
    kl_reward     rewards = scores - beta * KL(old || ref), beta from the KL controller
    adv           advantages on the driver, pure tensors          timing_s/adv
    update_critic the critic's PPO epochs (every step, also during trainer.critic_warmup)
    update_actor  PPO epochs over mini-batches (after critic_warmup steps)   timing_s/update_actor

`build_phases` picks which run, once, from the config (who makes the old log-probs: the comment in
`__init__`); the trainer (ppo_trainer.py) walks the list. The next step's generate_sequences is
queued behind this step's update_actor when the trainer says nothing comes between them
(`quiet_after`, rollout_prefetch.py). Every dispatch goes through one row order (batching.Dispatch).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable

import numpy as np
import torch

from verl_lite.algos import ADV_ESTIMATORS
from verl_lite.algos.kl_ctrl import KLController, apply_kl_penalty
from verl_lite.algos.registry import REWARD_EXTRA
from verl_lite.algos.rollout_corr import compute_rollout_correction, correction_enabled
from verl_lite.config.common import trainer_mode
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.data.rlhf_dataset import EpochSampler, RLHFDataset
from verl_lite.errors import RunError
from verl_lite.protocol import DataProto
from verl_lite.rollout.base import compute_logprob_diff_metrics
from verl_lite.trainer.batching import Dispatch, in_order, inverse_order
from verl_lite.trainer.colocate_async import ColocateAsync
from verl_lite.trainer.dump import Generations, dump_jsonl
from verl_lite.trainer.dynamic_sampling import collect_kept_groups
from verl_lite.trainer.rollout_inputs import rollout_inputs
from verl_lite.trainer.rollout_prefetch import QueuedRollout, peek_next_indices
from verl_lite.trainer.separate_async import SeparateAsync
from verl_lite.trainer.worker_setup import WorkerSet
from verl_lite.utils.metric_reduce import reduce_local_updates

MODEL_INPUTS = ["input_ids", "attention_mask", "position_ids", "responses"]


class StepPhases:
    """The step's phases over the worker groups, the training data and the reward function. `step`
    is the step being run (the trainer sets it); `quiet_after(step)`: nothing but the next step's
    rollout follows this step's update on the workers (no validation, checkpoint or end)."""

    def __init__(
        self,
        config: PPOTrainerConfig,
        workers: WorkerSet,
        dataset: RLHFDataset,
        sampler: EpochSampler,
        reward_fn,
        kl_ctrl: KLController | None,
        tokenizer,
        quiet_after: Callable[[int], bool],
    ):
        self.config, self.workers, self.dataset = config, workers, dataset
        self.sampler, self.reward_fn, self.kl_ctrl, self.tokenizer = sampler, reward_fn, kl_ctrl, tokenizer
        self.quiet_after, self.dispatch, self.step = quiet_after, Dispatch(config, workers.world_size), 0
        alg = config.algorithm
        self.adv_spec = ADV_ESTIMATORS.spec(alg.adv_estimator)
        self.adv_kwargs = ADV_ESTIMATORS.read_keys(self.adv_spec, config)  # the keys the estimator reads
        rollout, actor = config.actor_rollout_ref.rollout, config.actor_rollout_ref.actor
        self.rollout_correction = correction_enabled(alg.rollout_correction, rollout.calculate_log_probs)
        # Who makes the old log-probs (no pass is run twice, no two calls go where one does). Read
        # before the update (KL in the reward, sum_pi_squared, an estimator's inputs, rollout
        # correction's weights and rejection, or its bypass mode, where they are the rollout's): one
        # old_log_prob call, with the reference's (in bypass mode only when something else needs
        # it). Otherwise update_actor makes them, and the reference's for the KL loss, in its own
        # call: the first mini-batch's from its own forward (nothing has moved the weights yet: exactly
        # on-policy in the sync mode, the decoupled old policy under the async modes), the other rows' before any step; with one mini-batch and one epoch that is
        # all of them (verl's `on_policy`).
        read_before = (
            alg.use_kl_in_reward
            or actor.calculate_sum_pi_squared
            or bool({"old_log_probs", "sum_pi_squared"} & set(self.adv_spec.inputs))
        )
        self.old_log_probs_in_update = not read_before and not self.rollout_correction
        bypass = alg.rollout_correction.bypass_mode
        self.old_log_prob_pass = read_before if bypass else not self.old_log_probs_in_update
        # DAPO's next generation depends on this step's kept groups: no early queueing there
        # verl 0.9's async modes: the gen phase draws from a replay buffer (colocate_async.py, and
        # separate_async.py with a rollout group of its own)
        mode = trainer_mode(config)
        self.replay = {"colocate_async": ColocateAsync, "separate_async": SeparateAsync}.get(mode)
        if self.replay is not None:
            self.replay = self.replay(config, workers, dataset, sampler, tokenizer)
            self.replay.bind(self._with_responses, self._score)
        self.separate = self.replay if mode == "separate_async" else None
        self.prefetch_rollouts = not alg.filter_groups.enable and self.replay is None
        self.queued_rollout: QueuedRollout | None = None
        self.num_prefetched_rollouts = 0

    # --- which phases run ---------------------------------------------------------------------------
    def build_phases(self) -> list:
        """The step's phases in their fixed order: those every step runs, those the config asks for,
        and those the advantage estimator's spec names (e.g. ReMax's gen_max)."""
        alg, t = self.config.algorithm, self.config.trainer
        filtered = alg.filter_groups.enable
        gen = self._generate_async if self.replay else self._generate_filtered if filtered else self._generate
        available = {
            "gen": gen,
            "gen_max": self._remax_baseline,
            "reward": self._reward,
            "old_log_prob": self._old_log_prob,
            "rollout_corr": self._rollout_corr,
            "values": self._values,
            "kl_reward": self._kl_in_reward,
            "adv": self._advantage,
            "update_critic": self._update_critic,
            "update_actor": self._update_actor,
            "sync_rollout": self._sync_rollout,
            "dump_rollout_generations": self._dump_rollout,
        }
        wanted = {"gen", "adv", "update_actor", *self.adv_spec.phases}
        wanted |= {"old_log_prob"} if self.old_log_prob_pass else set()  # (with the reference's)
        wanted |= {"rollout_corr"} if self.rollout_correction else set()
        wanted |= set() if filtered else {"reward"}  # dynamic sampling scores as it generates
        wanted |= {"values", "update_critic"} if self.workers.use_critic else set()
        wanted |= {"kl_reward"} if alg.use_kl_in_reward else set()
        wanted |= {"sync_rollout"} if self.separate else set()
        wanted |= {"dump_rollout_generations"} if t.rollout_data_dir else set()
        if self.separate:  # verl 0.9 runs them per local update: a batch statistic is its mini-batch's
            for name in ("rollout_corr", "adv"):
                available[name] = self._per_local_update(available[name])
        unknown = sorted(wanted - available.keys())
        if unknown:
            raise ValueError(
                f"algorithm.adv_estimator={alg.adv_estimator} asks for trainer phases {unknown}, which the "
                f"trainer does not have; it has {list(available)}"
            )
        return [(name, phase) for name, phase in available.items() if name in wanted]

    def _per_local_update(self, phase):
        """separate_async: `phase` over each local update's mini-batch on its own (ppo_mini_batch_size
        prompts' rows, consecutive as update_actor splits them), as verl 0.9 runs every phase after
        the sample per mini-batch: an estimator's whitening or a rejection's batch statistic is the
        mini-batch's. Its metrics are reduced over the mini-batches as verl's are (utils/metric_reduce.py)."""
        cfg = self.config.actor_rollout_ref
        rows = cfg.actor.ppo_mini_batch_size * cfg.rollout.n

        def per_mini_batch(batch: DataProto, metrics: dict) -> DataProto:
            parts, seen = [], {}
            for part in batch.split(rows):
                mine: dict = {}
                parts.append(phase(part, mine))
                for key, value in mine.items():
                    seen.setdefault(key, []).append(value)
            metrics.update({k: reduce_local_updates(k, v) for k, v in seen.items()})
            return DataProto.concat(parts)

        return per_mini_batch

    # --- prompts ------------------------------------------------------------------------------------
    def prompts(self, indices: list[int]) -> DataProto:
        """The step's prompts: collated when its rollout was queued early, else now."""
        if self.queued_rollout is not None:
            return self.queued_rollout.batch_for(indices)
        return self.dataset.collate(indices)

    def assign_uids(self, batch: DataProto, tag: str = "") -> None:
        batch.non_tensor_batch["uid"] = np.array(
            [f"{self.step}-{tag}{i}" for i in range(len(batch))], dtype=object
        )

    def _rollout_inputs(self, batch: DataProto) -> DataProto:
        """The prompts for generate_sequences; with agent loops, the rows' fields (rollout_inputs.py)."""
        return rollout_inputs(
            batch, self.dataset, self.config.actor_rollout_ref.rollout.agent.default_agent_loop
        )

    def _queue_next_rollout(self) -> None:
        """Submit the next step's generate_sequences behind the update just submitted, when nothing
        the workers must see comes between the two (rollout_prefetch.py)."""
        if not self.prefetch_rollouts or not self.quiet_after(self.step):
            return
        indices = peek_next_indices(self.sampler)
        batch = self.dataset.collate(indices)
        call = self.workers.actor_rollout_wg.submit("generate_sequences", self._rollout_inputs(batch))
        self.queued_rollout = QueuedRollout(indices, batch, call)
        self.num_prefetched_rollouts += 1

    # --- generation ---------------------------------------------------------------------------------
    def _generate(self, batch: DataProto, metrics: dict) -> DataProto:
        queued, self.queued_rollout = self.queued_rollout, None
        if queued is not None:  # queued behind the previous step's update, for this very batch
            gen = queued.result_for(batch)
        else:
            prompts = self._rollout_inputs(batch)
            prompts.meta_info["generate_follows"] = self.generate_follows_gen()
            gen = self.workers.actor_rollout_wg.generate_sequences(prompts)
        metrics.update(gen.meta_info.pop("metrics", {}))
        return self._with_responses(batch, gen)

    def _with_responses(self, batch: DataProto, gen: DataProto) -> DataProto:
        """The prompts' rows repeated rollout.n times, each with its response (`gen`'s layout)."""
        expanded = batch.repeat(self.config.actor_rollout_ref.rollout.n, interleave=True)
        for key in ("input_ids", "attention_mask", "position_ids"):
            expanded.batch.pop(key)
        return expanded.union(gen)

    def _generate_async(self, batch: DataProto, metrics: dict) -> DataProto:
        """The async modes: this step's prompts join the replay buffer; the batch is the groups that
        finished first (colocate_async.py, separate_async.py); with DAPO, scored as they finished."""
        return self.replay.generate(batch, self.step, metrics)

    def _sync_rollout(self, batch: DataProto, metrics: dict) -> DataProto:
        """separate_async: the updated weights to the rollout group, checked where they landed."""
        self.separate.push_weights(self.step, metrics)
        return batch

    def generate_follows_gen(self) -> bool:
        """The gen phase's generate: DAPO may generate further batches after scoring these; ReMax's
        greedy baseline generates right after, before any scoring."""
        if self.config.algorithm.filter_groups.enable:
            return self.workers.keep_rollout(scores_between=True, surely_generate=False)
        return "gen_max" in self.adv_spec.phases

    def _generate_filtered(self, batch: DataProto, metrics: dict) -> DataProto:
        """DAPO's dynamic sampling (dynamic_sampling.py)."""
        fg = self.config.algorithm.filter_groups

        def next_scored_batch(i: int):
            prompts = batch if i == 0 else self._next_prompt_batch(tag=f"g{i}-")
            gen = self._generate(prompts, metrics)
            return gen, self._score(gen, metrics)

        kept, counters = collect_kept_groups(
            next_scored_batch,
            self.config.data.train_batch_size,
            self.config.actor_rollout_ref.rollout.n,
            fg.metric,
            fg.max_num_gen_batches,
        )
        metrics.update(counters)
        return kept

    def _next_prompt_batch(self, tag: str) -> DataProto:
        """The sampler's next batch of prompts (into the next epoch when this one is used up)."""
        batch = self.dataset.collate(self.sampler.next_batch())
        self.assign_uids(batch, tag)
        return batch

    def _remax_baseline(self, batch: DataProto, metrics: dict) -> DataProto:
        """Greedy responses to the same prompts; their scores become `reward_baselines` (per response)."""
        n = self.config.actor_rollout_ref.rollout.n
        rows = batch[torch.arange(0, len(batch), n)]  # one row per prompt (responses are adjacent)
        width = rows.batch["prompts"].shape[1]
        prompts = DataProto.from_dict(
            {
                "input_ids": rows.batch["prompts"],
                "attention_mask": rows.batch["attention_mask"][:, :width],
                "position_ids": rows.batch["position_ids"][:, :width],
            },
            dict(rows.non_tensor_batch),
        )
        prompts = self._rollout_inputs(prompts)  # agent loops run the baseline too
        prompts.meta_info["greedy_baseline"] = True
        gen = self.workers.actor_rollout_wg.generate_sequences(prompts)
        gen.meta_info.pop("metrics", None)
        # the rollout's own fields too (num_turns, tool rewards), as the reward function reads them (verl: union)
        baseline = DataProto(dict(gen.batch), {**rows.non_tensor_batch, **gen.non_tensor_batch}, {})
        scores, _ = self._compute_scores(baseline, {})
        batch.batch["reward_baselines"] = scores.sum(-1).repeat_interleave(n)  # (bs,)
        metrics["critic/reward_baselines/mean"] = scores.sum(-1).mean().item()
        return batch

    # --- scores -------------------------------------------------------------------------------------
    def _compute_scores(self, batch: DataProto, metrics: dict) -> tuple[torch.Tensor, dict]:
        """(bs, R) token-level scores and the reward function's extra info. With a reward model its
        score is the reward and the rule reward is not computed (verl's semantics); so are scores an
        agent loop gave every trajectory (rm_scores)."""
        if "rm_scores" in batch.batch:
            return batch.batch["rm_scores"], {}
        if self.workers.rm_wg is None:
            return self.reward_fn(batch)
        # any number of rows: DAPO under the async modes scores the groups finished so far, ReMax its
        # greedy baselines (one per prompt); copies of the first rows fill the last ranks' share
        inputs, pad = batch.select([*MODEL_INPUTS, "response_mask"], meta_keys=[]).pad_to_divisor(
            self.dispatch.dp_size("reward")
        )
        out = self.dispatch.forward(self.workers.rm_wg.compute_rm_score, inputs, "reward")
        metrics.update(out.meta_info.get("metrics", {}))
        return out.unpad(pad).batch["rm_scores"], {}

    def _score(self, batch: DataProto, metrics: dict) -> dict:
        """Scores into the batch, the means of the reward function's extra info, and that info as one
        dict per row (verl's reward_extra_info) when the estimator reads it (gdpo's components)."""
        scores, extra = self._compute_scores(batch, metrics)
        batch.batch["token_level_scores"] = scores
        batch.batch["token_level_rewards"] = scores
        for key, values in extra.items():
            if values and isinstance(values[0], (int, float)):
                metrics[f"reward_extra/{key}/mean"] = float(np.mean(values))
        if REWARD_EXTRA in self.adv_spec.inputs:  # one dict per row, only for an estimator that reads it
            every_row = {k: v for k, v in extra.items() if len(v) == len(batch)}  # not keys some rows lack
            rows = [{k: v[i] for k, v in every_row.items()} for i in range(len(batch))]
            batch.non_tensor_batch[REWARD_EXTRA] = np.array(rows, dtype=object)
        return extra

    def _reward(self, batch: DataProto, metrics: dict) -> DataProto:
        self._score(batch, metrics)
        return batch

    # --- log-probs, values, rewards, advantages -------------------------------------------------------
    def _old_log_prob(self, batch: DataProto, metrics: dict) -> DataProto:
        """old_log_probs (and ref_log_prob when the workers hold the reference), one call."""
        inputs = batch.select(MODEL_INPUTS)
        batch = batch.union(self.dispatch.forward(self.workers.actor_rollout_wg.compute_log_probs, inputs))
        _logprob_diff_metrics(batch, metrics)
        return batch

    def _rollout_corr(self, batch: DataProto, metrics: dict) -> DataProto:
        """Decoupled mode: IS weights and rejection from the old log-probs against the rollout's, once
        for the batch, before the advantage (rejected tokens leave the response mask); the weights
        travel to the update. Bypass mode: the rollout's log-probs become the old ones (the actor
        computes the correction per micro-batch, from the current policy)."""
        rc, b = self.config.algorithm.rollout_correction, batch.batch
        if rc.bypass_mode:
            b["old_log_probs"] = b["rollout_log_probs"].clone()
            return batch
        weights, kept, corr_metrics = compute_rollout_correction(
            b["old_log_probs"], b["rollout_log_probs"], b["response_mask"], rc
        )
        b["response_mask"] = kept
        if weights is not None:
            b["rollout_is_weights"] = weights
        metrics.update(corr_metrics)
        return batch

    def _values(self, batch: DataProto, metrics: dict) -> DataProto:
        inputs = batch.select([*MODEL_INPUTS, "response_mask"], meta_keys=[])
        return batch.union(self.dispatch.forward(self.workers.critic_wg.compute_values, inputs, "critic"))

    def _kl_in_reward(self, batch: DataProto, metrics: dict) -> DataProto:
        b = batch.batch
        rewards, kl_metrics = apply_kl_penalty(
            b["token_level_scores"],
            b["old_log_probs"],
            b["ref_log_prob"],
            b["response_mask"],
            kl_coef=self.kl_ctrl.value,
            kl_penalty=self.config.algorithm.kl_penalty,
        )
        b["token_level_rewards"] = rewards
        metrics.update(kl_metrics)
        self.kl_ctrl.update(kl_metrics["actor/reward_kl_penalty"], n_steps=len(batch))
        return batch

    def _advantage(self, batch: DataProto, metrics: dict) -> DataProto:
        fields = batch.non_tensor_batch
        special = {"index": fields["uid"], REWARD_EXTRA: fields.get(REWARD_EXTRA)}
        inputs = {  # what the estimator's spec names: batch tensors, the group ids, the reward's extra info
            name: special[name] if name in special else batch.batch[name] for name in self.adv_spec.inputs
        }
        try:
            advantages, returns = self.adv_spec.fn(
                token_level_rewards=batch.batch["token_level_rewards"],
                response_mask=batch.batch["response_mask"],
                **inputs,
                **self.adv_kwargs,
            )
        except ValueError as e:  # what the batch cannot give the estimator (gdpo: a missing component)
            raise RunError(
                f"algorithm.adv_estimator={self.adv_spec.name}: {e}", traceback.format_exc()
            ) from e
        batch.batch["advantages"], batch.batch["returns"] = advantages, returns
        metrics.update(self.adv_spec.metrics(self.config, batch) if self.adv_spec.metrics else {})
        return batch

    # --- updates ------------------------------------------------------------------------------------
    def _update_critic(self, batch: DataProto, metrics: dict) -> DataProto:
        c, n = self.config.critic, self.config.actor_rollout_ref.rollout.n
        data = batch.select([*MODEL_INPUTS, "response_mask", "values", "returns"], meta_keys=[])
        out = self.workers.critic_wg.update_critic(
            data[self.dispatch.order(data, c.ppo_mini_batch_size * n, "critic")]
        )
        metrics.update(out.meta_info["metrics"])
        return batch

    def _update_actor(self, batch: DataProto, metrics: dict) -> DataProto:
        if self.step <= self.config.trainer.critic_warmup:
            return batch  # the first critic_warmup steps train only the critic
        cfg = self.config.actor_rollout_ref
        keys = [*MODEL_INPUTS, "response_mask", "advantages"]
        # without them the workers make old_log_probs (and ref_log_prob) in this call
        keys += [k for k in ("old_log_probs", "ref_log_prob", "rollout_is_weights") if k in batch.batch]
        if self.rollout_correction:  # the actor's rollout_corr/ metrics (and bypass mode's correction)
            keys.append("rollout_log_probs")
        data = batch.select(keys)
        order = self.dispatch.order(data, cfg.actor.ppo_mini_batch_size * cfg.rollout.n)
        call = self.workers.actor_rollout_wg.submit("update_actor", in_order(data, order))
        self._queue_next_rollout()
        out = call.result()
        metrics.update(out.meta_info["metrics"])
        if not self.old_log_probs_in_update:
            return batch
        batch = batch.union(in_order(out, inverse_order(order)))  # the rows back in place
        _logprob_diff_metrics(batch, metrics)
        return batch

    def _dump_rollout(self, batch: DataProto, metrics: dict) -> DataProto:
        scores = batch.batch["token_level_scores"].sum(-1).tolist()
        gens = Generations.decode(self.tokenizer, batch, scores)
        dump_jsonl(gens, self.config.trainer.rollout_data_dir, self.step)
        return batch


def _logprob_diff_metrics(batch: DataProto, metrics: dict) -> None:
    if "rollout_log_probs" in batch.batch:  # the rollout ran the actor's current weights?
        b = batch.batch
        metrics.update(
            compute_logprob_diff_metrics(b["rollout_log_probs"], b["old_log_probs"], b["response_mask"])
        )
