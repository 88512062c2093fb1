#!/usr/bin/env bash
# Dr. GRPO ("GRPO done right"): group-mean baseline without dividing by the group's std, and a
# loss summed over tokens and divided by a constant (the response length), so neither short nor
# long responses are favoured. No KL. key=value arguments override.
set -euo pipefail
${PYTHON:-python3} -m verl_lite.main_ppo --config-name demo \
    algorithm.adv_estimator=grpo \
    algorithm.norm_adv_by_std_in_grpo=False \
    algorithm.use_kl_in_reward=False \
    data.train_batch_size=32 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.actor.optim.lr=1e-4 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm \
    trainer.experiment_name=tiny_arith_drgrpo \
    "$@"
