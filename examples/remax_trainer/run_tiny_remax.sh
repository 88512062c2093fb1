#!/usr/bin/env bash
# ReMax: REINFORCE with a greedy-rollout baseline. Every step also decodes each prompt greedily;
# that response's score is subtracted from the sampled responses' scores. KL in the reward, as in
# verl's example. key=value arguments override.
set -euo pipefail
${PYTHON:-python3} -m verl_lite.main_ppo --config-name demo \
    algorithm.adv_estimator=remax \
    algorithm.use_kl_in_reward=True \
    algorithm.kl_penalty=kl \
    algorithm.kl_ctrl.kl_coef=0.001 \
    data.train_batch_size=32 \
    actor_rollout_ref.rollout.n=4 \
    actor_rollout_ref.actor.optim.lr=1e-4 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32 \
    actor_rollout_ref.actor.use_kl_loss=False \
    trainer.experiment_name=tiny_arith_remax \
    "$@"
