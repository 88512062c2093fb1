"""The trainer's phases beyond plain GRPO: critic, reward model, KL in the reward, ReMax, DAPO.

RayPPOTrainer (ppo_trainer.py) picks which of these run when it is built, from the config:

    gen           DAPO dynamic sampling when algorithm.filter_groups.enable: generate and score
                  batches, drop all-equal groups, until train_batch_size prompts are kept
    gen_max       ReMax: a greedy rollout of the same prompts; its score is the baseline
    rollout_corr  algorithm.rollout_correction: IS weights and rejection against the rollout's log-probs
                  (decoupled), or the rollout's log-probs as the old ones (bypass mode)
    values        the critic's values of the sampled responses (GAE)
    kl_reward     rewards = scores - beta * KL(old || ref), beta from the KL controller
    update_critic the critic's PPO epochs (every step, also during trainer.critic_warmup)

Every dispatch to a worker group goes through one row order (`_dp_order`): global mini-batches
stay whole whatever the world size, and with trainer.balance_batch each rank gets a balanced
share of tokens.
"""

from __future__ import annotations

import numpy as np
import torch

from verl_lite.algos.kl_ctrl import apply_kl_penalty
from verl_lite.algos.rollout_corr import compute_rollout_correction
from verl_lite.config.common import dp_size
from verl_lite.protocol import DataProto
from verl_lite.trainer.batching import dp_minibatch_order, inverse_order, is_identity, rank_token_loads
from verl_lite.trainer.dynamic_sampling import collect_kept_groups

MODEL_INPUTS = ["input_ids", "attention_mask", "position_ids", "responses"]


def in_order(data: DataProto, order: torch.Tensor) -> DataProto:
    """The rows of `data` in `order` (no copy when that is their order already: one rank, no balancing)."""
    return data if is_identity(order) else data[order]


class AlgorithmPhases:
    # --- dispatch -----------------------------------------------------------------------------------
    def dp_size(self, role: str) -> int:
        """Data-parallel ranks of a role: the world over its ulysses_sequence_parallel_size (the
        ranks of a sequence-parallel group share rows; the worker group sends each chunk to all)."""
        return dp_size(self.config, role) if role in ("actor", "critic") else self.world_size

    def _dp_order(self, data: DataProto, mini_rows: int, role: str = "actor") -> torch.Tensor:
        seqlens = data.batch["attention_mask"].sum(-1).tolist() if self.config.trainer.balance_batch else None
        return dp_minibatch_order(len(data), mini_rows, self.dp_size(role), seqlens)

    def _forward_dispatch(
        self, method, data: DataProto, role: str = "actor", mini_rows: int | None = None
    ) -> DataProto:
        """A group method over the batch in mini-batches of `mini_rows` (None: the whole batch as one,
        as a forward), results in row order."""
        order = self._dp_order(data, mini_rows or len(data), role)
        return in_order(method(in_order(data, order)), inverse_order(order))

    def _balance_metrics(self, batch: DataProto) -> dict[str, float]:
        """verl's global_seqlen/*: tokens per rank with plain chunking and with the order used."""
        seqlens = batch.batch["attention_mask"].sum(-1)
        dp = self.dp_size("actor")
        plain = rank_token_loads(seqlens, torch.arange(len(batch)), dp)
        used = rank_token_loads(seqlens, self._dp_order(batch, len(batch)), dp)
        return {
            "global_seqlen/min": min(plain),
            "global_seqlen/max": max(plain),
            "global_seqlen/minmax_diff": max(plain) - min(plain),
            "global_seqlen/balanced_min": min(used),
            "global_seqlen/balanced_max": max(used),
            "global_seqlen/mean": float(np.mean(used)),
        }

    # --- scores -------------------------------------------------------------------------------------
    def _compute_scores(self, batch: DataProto, metrics: dict) -> tuple[torch.Tensor, dict]:
        """(bs, R) token-level scores and the reward function's extra info. With a reward model its
        score is the reward and the rule reward is not computed (verl's semantics); so are scores an
        agent loop gave every trajectory (rm_scores)."""
        if "rm_scores" in batch.batch:
            return batch.batch["rm_scores"], {}
        if self.rm_wg is None:
            return self.reward_fn(batch)
        inputs = batch.select([*MODEL_INPUTS, "response_mask"], meta_keys=[])
        out = self._forward_dispatch(self.rm_wg.compute_rm_score, inputs, "reward")
        metrics.update(out.meta_info.get("metrics", {}))
        return out.batch["rm_scores"], {}

    def _val_scores(self, batch: DataProto) -> tuple[torch.Tensor, dict]:
        """Validation scores and extra info: the reward model's when there is one (as in verl), else
        the rules'; an agent loop's own scores first."""
        if "rm_scores" in batch.batch:
            return batch.batch["rm_scores"], {}
        if self.rm_wg is None:
            return self.val_reward_fn(batch)
        padded, pad = batch.select([*MODEL_INPUTS, "response_mask"], meta_keys=[]).pad_to_divisor(
            self.world_size
        )
        return self.rm_wg.compute_rm_score(padded).unpad(pad).batch["rm_scores"], {}

    def _score(self, batch: DataProto, metrics: dict) -> dict:
        scores, extra = self._compute_scores(batch, metrics)
        batch.batch["token_level_scores"] = scores
        batch.batch["token_level_rewards"] = scores
        for key, values in extra.items():
            if values and isinstance(values[0], (int, float)):
                metrics[f"reward_extra/{key}/mean"] = float(np.mean(values))
        return extra

    # --- DAPO dynamic sampling ----------------------------------------------------------------------
    def _generate_filtered(self, batch: DataProto, metrics: dict) -> DataProto:
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
        indices = next(self.sampler.epoch_batches(), None)
        if indices is None:
            indices = next(self.sampler.epoch_batches())
        batch = self.train_dataset.collate(indices)
        self._assign_uids(batch, tag)
        return batch

    def _assign_uids(self, batch: DataProto, tag: str = "") -> None:
        batch.non_tensor_batch["uid"] = np.array(
            [f"{self.global_steps}-{tag}{i}" for i in range(len(batch))], dtype=object
        )

    # --- ReMax ----------------------------------------------------------------------------------------
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
        prompts = self._rollout_inputs(prompts, self.train_dataset)  # agent loops run the baseline too
        prompts.meta_info["greedy_baseline"] = True
        gen = self.actor_rollout_wg.generate_sequences(prompts)
        gen.meta_info.pop("metrics", None)
        baseline = DataProto(dict(gen.batch), dict(rows.non_tensor_batch), {})
        scores, _ = self._compute_scores(baseline, {})
        batch.batch["reward_baselines"] = scores.sum(-1).repeat_interleave(n)  # (bs,)
        metrics["critic/reward_baselines/mean"] = scores.sum(-1).mean().item()
        return batch

    # --- rollout correction (algos/rollout_corr.py) ----------------------------------------------------
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

    # --- critic -------------------------------------------------------------------------------------
    def _values(self, batch: DataProto, metrics: dict) -> DataProto:
        inputs = batch.select([*MODEL_INPUTS, "response_mask"], meta_keys=[])
        return batch.union(self._forward_dispatch(self.critic_wg.compute_values, inputs, "critic"))

    def _update_critic(self, batch: DataProto, metrics: dict) -> DataProto:
        c, n = self.config.critic, self.config.actor_rollout_ref.rollout.n
        data = batch.select([*MODEL_INPUTS, "response_mask", "values", "returns"], meta_keys=[])
        out = self.critic_wg.update_critic(data[self._dp_order(data, c.ppo_mini_batch_size * n, "critic")])
        metrics.update(out.meta_info["metrics"])
        return batch

    # --- KL in the reward -----------------------------------------------------------------------------
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
