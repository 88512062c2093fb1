#!/usr/bin/env bash
# PPO with a critic, written as verl's quickstart command (docs/start/quickstart.rst, with
# verl_lite.main_ppo for verl.trainer.main_ppo): no algorithm.adv_estimator, so verl's default gae
# applies and a value model (critic.model.path) is trained beside the actor; KL to the reference in
# the reward. The paths name the embedded tiny model and arithmetic task; swap them (and the sizes)
# for your own to run it for real. DTYPE=bf16 on GPUs (fp32 here: bf16 is ~10x slower on CPUs).
# key=value arguments override.
set -euo pipefail
ENGINE=${ENGINE:-auto}  # vllm | hf | auto (vllm where installed)
DTYPE=${DTYPE:-fp32}
${PYTHON:-python3} -m verl_lite.main_ppo \
    data.train_files=verl_lite://arith/train.parquet \
    data.val_files=verl_lite://arith/test.parquet \
    data.train_batch_size=32 \
    data.max_prompt_length=16 \
    data.max_response_length=8 \
    actor_rollout_ref.model.path=verl_lite://tiny-qwen2-arith \
    actor_rollout_ref.actor.optim.lr=1e-4 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    +actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=$DTYPE \
    actor_rollout_ref.rollout.name=$ENGINE \
    actor_rollout_ref.rollout.dtype=$DTYPE \
    actor_rollout_ref.rollout.enforce_eager=True \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 \
    +actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=$DTYPE \
    critic.optim.lr=1e-4 \
    critic.model.path=verl_lite://tiny-qwen2-arith \
    critic.ppo_micro_batch_size_per_gpu=8 \
    +critic.model.fsdp_config.mixed_precision.param_dtype=$DTYPE \
    algorithm.use_kl_in_reward=True \
    algorithm.kl_ctrl.kl_coef=0.001 \
    trainer.logger=console \
    trainer.val_before_train=False \
    trainer.n_gpus_per_node=2 \
    trainer.nnodes=1 \
    trainer.save_freq=-1 \
    trainer.test_freq=10 \
    trainer.total_epochs=1 "$@"
