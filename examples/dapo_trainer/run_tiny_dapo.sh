#!/usr/bin/env bash
# DAPO: GRPO advantages with clip-higher (asymmetric clip range), token-level loss aggregation, no
# KL, the overlong-buffer penalty (responses within `len` tokens of max_resp_len lose up to
# penalty_factor), and dynamic sampling: groups whose responses all score the same are dropped and
# more prompts are generated until data.train_batch_size prompts are kept. (The tiny task's scorer
# returns a plain number, so the filter metric is the sequence score; use metric=acc with a scorer
# that reports 'acc'.) key=value arguments override.
set -euo pipefail
${PYTHON:-python3} -m verl_lite.main_ppo --config-name demo \
    algorithm.adv_estimator=grpo \
    algorithm.use_kl_in_reward=False \
    algorithm.filter_groups.enable=True \
    algorithm.filter_groups.metric=seq_reward \
    algorithm.filter_groups.max_num_gen_batches=10 \
    reward_model.reward_manager=dapo \
    +reward_model.reward_kwargs.overlong_buffer_cfg.enable=True \
    +reward_model.reward_kwargs.overlong_buffer_cfg.len=4 \
    +reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0 \
    +reward_model.reward_kwargs.overlong_buffer_cfg.log=True \
    data.train_batch_size=32 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.actor.optim.lr=1e-4 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.clip_ratio_low=0.2 \
    actor_rollout_ref.actor.clip_ratio_high=0.28 \
    actor_rollout_ref.actor.clip_ratio_c=10.0 \
    actor_rollout_ref.actor.loss_agg_mode=token-mean \
    trainer.experiment_name=tiny_arith_dapo \
    "$@"
