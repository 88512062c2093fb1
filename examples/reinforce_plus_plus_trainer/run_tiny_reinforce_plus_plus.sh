#!/usr/bin/env bash
# REINFORCE++: discounted returns whitened over the batch (no critic, no group baseline); KL to the
# reference as a loss (k2 / mse), as in verl's example. key=value arguments override; for the
# group-baseline variant use algorithm.adv_estimator=reinforce_plus_plus_baseline.
set -euo pipefail
${PYTHON:-python3} -m verl_lite.main_ppo --config-name demo \
    algorithm.adv_estimator=reinforce_plus_plus \
    algorithm.gamma=1.0 \
    algorithm.use_kl_in_reward=False \
    data.train_batch_size=32 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.actor.optim.lr=1e-4 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=mse \
    trainer.experiment_name=tiny_arith_reinforce_plus_plus \
    "$@"
