#!/usr/bin/env bash
# GPG, written as verl's examples/gpg_trainer/run_qwen2-7b_math.sh (with verl_lite.main_ppo for
# verl.trainer.main_ppo): group-centred advantages rescaled by batch size / responses with a nonzero
# score, trained with the plain policy gradient -A logp (no ratio, no clip, no KL).
# The paths name the embedded tiny model and arithmetic task; swap them (and the sizes) for your own
# to run it for real. DTYPE=bf16 on GPUs (fp32 here: bf16 is ~10x slower on CPUs). key=value
# arguments override.
set -euo pipefail
ENGINE=${ENGINE:-auto}  # vllm | hf | auto (vllm where installed)
DTYPE=${DTYPE:-fp32}
${PYTHON:-python3} -m verl_lite.main_ppo \
    algorithm.adv_estimator=gpg \
    data.train_files=verl_lite://arith/train.parquet \
    data.val_files=verl_lite://arith/test.parquet \
    data.train_batch_size=32 \
    data.max_prompt_length=16 \
    data.max_response_length=8 \
    data.filter_overlong_prompts=True \
    data.truncation='error' \
    actor_rollout_ref.model.path=verl_lite://tiny-qwen2-arith \
    actor_rollout_ref.actor.optim.lr=1e-4 \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32 \
    +actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=$DTYPE \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.name=$ENGINE \
    actor_rollout_ref.rollout.dtype=$DTYPE \
    actor_rollout_ref.rollout.enforce_eager=True \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=64 \
    +actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=$DTYPE \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.policy_loss.loss_mode=gpg \
    actor_rollout_ref.actor.entropy_coeff=0 \
    algorithm.use_kl_in_reward=False \
    trainer.critic_warmup=0 \
    trainer.logger='["console","file"]' \
    trainer.project_name='verl_lite_examples' \
    trainer.experiment_name='tiny_arith_gpg' \
    trainer.val_before_train=False \
    trainer.n_gpus_per_node=2 \
    trainer.nnodes=1 \
    trainer.save_freq=-1 \
    trainer.test_freq=20 \
    trainer.total_epochs=1 "$@"
