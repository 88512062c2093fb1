#!/usr/bin/env bash
# GRPO, written as verl's examples/grpo_trainer/run_qwen2-7b_seq_balance.sh (with verl_lite.main_ppo
# for verl.trainer.main_ppo): group-normalised outcome advantages over n responses per prompt, KL to
# the reference as a loss (low_var_kl), no critic, and verl's memory keys: remove padding, gradient
# checkpointing, token-budgeted micro-batches (use_dynamic_bsz), actor param+optimizer offload and ref
# param offload, fused kernels off, no sequence parallelism. The paths name the embedded tiny model and
# arithmetic task; swap them (and the sizes) for your own to run it for real. DTYPE=bf16 on GPUs
# (verl's default compute dtype; fp32 here because bf16 is ~10x slower on CPUs). key=value arguments
# override.
set -euo pipefail
ENGINE=${ENGINE:-auto}  # vllm | hf | auto (vllm where installed)
DTYPE=${DTYPE:-fp32}
${PYTHON:-python3} -m verl_lite.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files=verl_lite://arith/train.parquet \
    data.val_files=verl_lite://arith/test.parquet \
    data.return_raw_chat=True \
    data.train_batch_size=32 \
    data.max_prompt_length=16 \
    data.max_response_length=8 \
    data.filter_overlong_prompts=True \
    data.truncation='error' \
    actor_rollout_ref.model.path=verl_lite://tiny-qwen2-arith \
    actor_rollout_ref.actor.optim.lr=1e-4 \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.model.use_fused_kernels=False \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.use_dynamic_bsz=True \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=256 \
    actor_rollout_ref.actor.ulysses_sequence_parallel_size=1 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.fsdp_config.param_offload=True \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=True \
    +actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=$DTYPE \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.name=$ENGINE \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.multi_turn.format=hermes \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.dtype=$DTYPE \
    actor_rollout_ref.rollout.enforce_eager=True \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.ref.fsdp_config.param_offload=True \
    +actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=$DTYPE \
    algorithm.use_kl_in_reward=False \
    trainer.critic_warmup=0 \
    trainer.logger='["console","file"]' \
    trainer.project_name='verl_lite_examples' \
    trainer.experiment_name='tiny_arith_grpo' \
    trainer.val_before_train=False \
    trainer.n_gpus_per_node=2 \
    trainer.nnodes=1 \
    trainer.save_freq=-1 \
    trainer.test_freq=20 \
    trainer.total_epochs=1 "$@"
