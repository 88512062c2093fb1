#!/usr/bin/env bash
# Optimal Token Baseline: returns-to-go minus a per-token baseline that weighs each response of the
# group by its accumulated gradient energy; the actor also returns sum_v pi_v^2 per token for it
# (calculate_sum_pi_squared), which adds verl's variance_proxy/* metrics. Runs on the embedded tiny
# model; key=value arguments override.
set -euo pipefail
${PYTHON:-python3} -m verl_lite.main_ppo --config-name demo \
    algorithm.adv_estimator=optimal_token_baseline \
    algorithm.use_kl_in_reward=False \
    data.train_batch_size=32 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.actor.optim.lr=1e-4 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.actor.calculate_sum_pi_squared=True \
    trainer.experiment_name=tiny_arith_otb \
    "$@"
