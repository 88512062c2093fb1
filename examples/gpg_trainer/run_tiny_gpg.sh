#!/usr/bin/env bash
# GPG: group-centred advantages rescaled by batch size / responses with a nonzero score, trained with
# the plain policy gradient -A logp (no ratio, no clip, no KL). Runs on the embedded tiny model;
# key=value arguments override.
set -euo pipefail
${PYTHON:-python3} -m verl_lite.main_ppo --config-name demo \
    algorithm.adv_estimator=gpg \
    algorithm.use_kl_in_reward=False \
    data.train_batch_size=32 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.actor.optim.lr=1e-4 \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.policy_loss.loss_mode=gpg \
    actor_rollout_ref.actor.entropy_coeff=0 \
    trainer.experiment_name=tiny_arith_gpg \
    "$@"
