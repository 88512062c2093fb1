#!/usr/bin/env bash
# PPO with a critic: GAE advantages from a learned value model, KL to the reference in the reward
# (InstructGPT-style). Runs on the embedded tiny model and arithmetic task; any key=value after
# the script overrides (e.g. a real model: actor_rollout_ref.model.path=/models/Qwen2.5-0.5B-Instruct).
set -euo pipefail
${PYTHON:-python3} -m verl_lite.main_ppo --config-name demo \
    algorithm.adv_estimator=gae \
    algorithm.gamma=1.0 \
    algorithm.lam=0.95 \
    algorithm.use_kl_in_reward=True \
    algorithm.kl_penalty=kl \
    algorithm.kl_ctrl.type=fixed \
    algorithm.kl_ctrl.kl_coef=0.001 \
    data.train_batch_size=32 \
    actor_rollout_ref.rollout.n=1 \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.actor.optim.lr=1e-4 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.actor.use_kl_loss=False \
    critic.optim.lr=1e-4 \
    critic.model.use_remove_padding=True \
    critic.ppo_micro_batch_size_per_gpu=8 \
    critic.cliprange_value=0.5 \
    trainer.critic_warmup=0 \
    trainer.experiment_name=tiny_arith_ppo \
    "$@"
