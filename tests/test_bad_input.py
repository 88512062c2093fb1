"""Bad input of every class, through the real CLI entry: exit status 2, one line naming key/file/row,
before Ray starts.

The table drives `main_ppo.run` (the body of the Hydra main) in-process on a config composed with
Hydra's compose API: it costs a fraction of a second per case instead of a process start. Ray is
made unreachable (`start_ray` fails the test if called), which proves the input was refused before
Ray (`pytest --durations=0` lists each case's time).
Two subprocess runs keep the process boundary honest (the exit status and stderr of the real
`python -m verl_lite.main_ppo`): one bad input at start-up, one reward function failing mid-run.
The cluster check after joining runs against the session's local Ray.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from tests.helpers.bad_inputs import (
    METADATA_PAYLOADS,
    build_data_files,
    build_model_folders,
    damaged_checkpoints,
    payload_ran,
    register_payload_extension,
)
from tests.helpers.processes import kill_survivors, run_watched, small_filesystem
from verl_lite import main_ppo
from verl_lite.config.compose import compose_config
from verl_lite.config.overrides import OverrideError, normalize_argv
from verl_lite.protocol import DataProto

ARR = "actor_rollout_ref"

# The demo config, with every value the cases depend on set explicitly.
BASE = [
    f"{ARR}.model.path=verl_lite://tiny-qwen2-arith",
    "data.train_files=verl_lite://arith/train.parquet",
    "data.val_files=verl_lite://arith/test.parquet",
    "data.max_prompt_length=16",
    "data.max_response_length=8",
    "data.train_batch_size=8",
    "data.val_batch_size=null",
    "data.truncation=error",
    "data.filter_overlong_prompts=False",
    f"{ARR}.rollout.name=hf",
    f"{ARR}.rollout.n=4",
    f"{ARR}.actor.ppo_mini_batch_size=4",
    f"{ARR}.actor.ppo_micro_batch_size_per_gpu=4",
    f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu=8",
    f"{ARR}.ref.log_prob_micro_batch_size_per_gpu=8",
    f"{ARR}.actor.use_dynamic_bsz=False",
    f"{ARR}.actor.fsdp_config.model_dtype=fp32",
    f"{ARR}.actor.fsdp_config.mixed_precision.param_dtype=fp32",
    f"{ARR}.rollout.dtype=fp32",
    f"{ARR}.rollout.tensor_model_parallel_size=1",
    "algorithm.adv_estimator=grpo",
    "reward_model.enable=False",
    "custom_reward_function.path=null",
    "trainer.nnodes=1",
    "trainer.n_gpus_per_node=2",
    "trainer.device=cpu",
    "trainer.logger=[console]",
    "trainer.total_training_steps=1",
    "trainer.val_before_train=False",
    "trainer.test_freq=-1",
    "trainer.save_freq=-1",
    "trainer.resume_mode=disable",
    f"{ARR}.actor.checkpoint.save_contents=[model,optimizer,extra]",
    f"{ARR}.actor.checkpoint.load_contents=[model,optimizer,extra]",
    "ray_kwargs.ray_init.address=null",
]

VLLM = [
    f"{ARR}.rollout.name=vllm",
    f"{ARR}.rollout.max_num_seqs=64",
    f"{ARR}.rollout.enable_chunked_prefill=True",
]
GAE = ["algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=4"]

# (id, overrides ({d}: data files, {m}: model folders, {c}: checkpoints, {r}: reward files), fragments)
CASES = [
    # --- config values, per section ---------------------------------------------------------------
    (
        "data_val_batch_negative",
        ["data.val_batch_size=-1"],
        ["data.val_batch_size=-1 must be a positive integer or null"],
    ),
    # --- values that would enter the loss as nan or as nothing (issue 38, class 3) -------------------
    (
        "rollout_is_threshold_nan",
        [
            "algorithm.rollout_correction.rollout_is=token",
            "algorithm.rollout_correction.rollout_is_threshold=nan",
        ],
        ["algorithm.rollout_correction.rollout_is_threshold=nan must be a finite positive number"],
    ),
    (
        "rollout_is_threshold_inf",
        [
            "algorithm.rollout_correction.rollout_is=sequence",
            "algorithm.rollout_correction.rollout_is_threshold=inf",
        ],
        ["algorithm.rollout_correction.rollout_is_threshold=inf must be a finite positive number"],
    ),
    (
        "rollout_rs_lower_above_upper",
        [
            "algorithm.rollout_correction.rollout_rs=token_k1",
            "algorithm.rollout_correction.rollout_rs_threshold=2.0_0.5",
        ],
        ["token_k1's range '2.0_0.5' has its lower bound above its upper; write lower_upper, e.g. 0.5_2.0"],
    ),
    (
        "rollout_rs_threshold_nan",
        [
            "algorithm.rollout_correction.rollout_rs=seq_max_k2",
            "algorithm.rollout_correction.rollout_rs_threshold=nan",
        ],
        ["bounds for seq_max_k2 must be finite positive numbers, got 'nan'"],
    ),
    (
        "data_train_batch_zero",
        ["data.train_batch_size=0"],
        ["data.train_batch_size=0 must be a positive integer"],
    ),
    ("data_prompt_length_negative", ["data.max_prompt_length=-4"], ["data.max_prompt_length=-4 must be"]),
    ("data_seed_negative", ["data.seed=-1"], ["data.seed=-1 must be an integer >= 0 or null"]),
    (
        "actor_clip_ratio_negative",
        [f"{ARR}.actor.clip_ratio=-0.2"],
        [f"{ARR}.actor.clip_ratio=-0.2 must be a number in (0, 1)"],
    ),
    (
        "actor_clip_high_zero",
        [f"{ARR}.actor.clip_ratio_high=0"],
        [f"{ARR}.actor.clip_ratio_high=0.0 must be"],
    ),
    (
        "actor_lr_nan",
        [f"{ARR}.actor.optim.lr=nan"],
        [f"{ARR}.actor.optim.lr=nan must be a finite number > 0"],
    ),
    (
        "actor_lr_negative",
        [f"{ARR}.actor.optim.lr=-1e-5"],
        [f"{ARR}.actor.optim.lr=-1e-05 must be a finite number > 0"],
    ),
    (
        "actor_betas_one",
        [f"{ARR}.actor.optim.betas=[0.9]"],
        [f"{ARR}.actor.optim.betas=[0.9] must be two numbers in [0, 1)"],
    ),
    (
        "actor_betas_above_one",
        [f"{ARR}.actor.optim.betas=[0.9,1.5]"],
        ["betas=[0.9, 1.5] must be two numbers"],
    ),
    (
        "actor_warmup_ratio",
        [f"{ARR}.actor.optim.lr_warmup_steps_ratio=2.0"],
        ["lr_warmup_steps_ratio=2.0 must be a number in [0, 1]"],
    ),
    (
        "actor_kl_coef_inf",
        [f"{ARR}.actor.use_kl_loss=True", f"{ARR}.actor.kl_loss_coef=inf"],
        [f"{ARR}.actor.kl_loss_coef=inf must be a finite number >= 0"],
    ),
    (
        "actor_entropy_negative",
        [f"{ARR}.actor.entropy_coeff=-0.01"],
        ["entropy_coeff=-0.01 must be a finite number >= 0"],
    ),
    (
        "actor_grad_clip_zero",
        [f"{ARR}.actor.grad_clip=0"],
        [f"{ARR}.actor.grad_clip=0.0 must be a finite number > 0"],
    ),
    (
        "actor_micro_zero",
        [f"{ARR}.actor.ppo_micro_batch_size_per_gpu=0"],
        ["ppo_micro_batch_size_per_gpu=0 must be a positive integer or null"],
    ),
    (
        "actor_epochs_zero",
        [f"{ARR}.actor.ppo_epochs=0"],
        [f"{ARR}.actor.ppo_epochs=0 must be a positive integer"],
    ),
    (
        "rollout_response_length_zero",
        [f"{ARR}.rollout.response_length=0"],
        [f"{ARR}.rollout.response_length=0 must be a positive integer"],
    ),
    (
        "rollout_response_length_negative",
        [f"{ARR}.rollout.response_length=-3"],
        [f"{ARR}.rollout.response_length=-3 must be"],
    ),
    (
        "rollout_top_p_zero",
        [f"{ARR}.rollout.top_p=0"],
        [f"{ARR}.rollout.top_p=0.0 must be a number in (0, 1]"],
    ),
    (
        "rollout_temperature_negative",
        [f"{ARR}.rollout.temperature=-1.0"],
        [f"{ARR}.rollout.temperature=-1.0 must be"],
    ),
    (
        "rollout_top_k",
        [f"{ARR}.rollout.top_k=-5"],
        [f"{ARR}.rollout.top_k=-5 must be -1 (no top-k) or a positive integer"],
    ),
    (
        "rollout_val_n_zero",
        [f"{ARR}.rollout.val_kwargs.n=0"],
        [f"{ARR}.rollout.val_kwargs.n=0 must be a positive integer"],
    ),
    (
        "ref_micro_zero",
        [f"{ARR}.actor.use_kl_loss=True", f"{ARR}.ref.log_prob_micro_batch_size_per_gpu=0"],
        [f"{ARR}.ref.log_prob_micro_batch_size_per_gpu=0 must be"],
    ),
    (
        "vllm_batched_tokens_below_seqs",
        [*VLLM, f"{ARR}.rollout.max_num_batched_tokens=32"],
        [f"{ARR}.rollout.max_num_batched_tokens=32 is below {ARR}.rollout.max_num_seqs=64"],
    ),
    (
        "vllm_no_chunked_prefill",
        [
            *VLLM,
            f"{ARR}.rollout.enable_chunked_prefill=False",
            f"{ARR}.rollout.max_num_seqs=8",
            f"{ARR}.rollout.max_num_batched_tokens=16",
        ],
        ["max_num_batched_tokens=16 is below max_model_len=24 without chunked prefill"],
    ),
    (
        "vllm_max_model_len_beyond_model",
        [*VLLM, f"{ARR}.rollout.max_model_len=128"],
        [f"{ARR}.rollout.max_model_len=128 exceeds the model's 64 positions"],
    ),
    (
        "vllm_memory_share",
        [*VLLM, f"{ARR}.rollout.gpu_memory_utilization=1.5"],
        ["gpu_memory_utilization=1.5 must be a number in (0, 1]"],
    ),
    (
        "vllm_head_size",
        [*VLLM, f"{ARR}.model.path={{m[head16]}}"],
        ["head size 16", "use actor_rollout_ref.rollout.name=hf"],
    ),
    (
        "critic_cliprange_negative",
        [*GAE, "critic.cliprange_value=-0.5"],
        ["critic.cliprange_value=-0.5 must be a finite number > 0"],
    ),
    ("critic_lr_zero", [*GAE, "critic.optim.lr=0"], ["critic.optim.lr=0.0 must be a finite number > 0"]),
    (
        "reward_model_timeout_zero",
        ["reward_model.timeout=0"],
        ["reward_model.timeout=0.0 must be a finite number > 0"],
    ),
    (
        "reward_model_without_path",
        ["reward_model.enable=True", "reward_model.model.path=null"],
        ["reward_model.enable=True but reward_model.model.path is not set; point it at a reward model"],
    ),
    ("algorithm_gamma", ["algorithm.gamma=1.5"], ["algorithm.gamma=1.5 must be a number in [0, 1]"]),
    (
        "algorithm_kl_coef_negative",
        ["algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.kl_coef=-0.1"],
        ["algorithm.kl_ctrl.kl_coef=-0.1 must be a finite number >= 0"],
    ),
    (
        "algorithm_passk_single_sample",
        ["algorithm.adv_estimator=grpo_passk", f"{ARR}.rollout.n=1"],
        ["algorithm.adv_estimator=grpo_passk needs actor_rollout_ref.rollout.n >= 2"],
    ),
    (
        "trainer_workers_beyond_cpus",
        ["trainer.n_gpus_per_node=32", "data.train_batch_size=32", f"{ARR}.actor.ppo_mini_batch_size=32"],
        ["trainer.nnodes=1 x trainer.n_gpus_per_node=32 needs 32", "set trainer.n_gpus_per_node <= "],
    ),
    (
        "trainer_two_nodes_local",
        ["trainer.nnodes=2", "trainer.n_gpus_per_node=1"],
        ["a local Ray has one node", "RAY_ADDRESS"],
    ),
    (
        "trainer_timeout_zero",
        ["trainer.dist_timeout_s=0"],
        ["trainer.dist_timeout_s=0 must be a positive integer"],
    ),
    (
        "trainer_epochs_zero",
        ["trainer.total_epochs=0"],
        ["trainer.total_epochs=0 must be a positive integer"],
    ),
    (
        "ray_num_cpus_zero",
        ["ray_kwargs.ray_init.num_cpus=0"],
        ["ray_kwargs.ray_init.num_cpus=0 must be a positive integer or null"],
    ),
    (
        "config_misspelled_key_forced",
        [f"+{ARR}.actor.clip_ratoi=0.3"],
        [
            f"{ARR}.actor.clip_ratoi is not a key of verl_lite's config",
            f"did you mean {ARR}.actor.clip_ratio",
        ],
    ),
    (
        "config_misspelled_key",
        ["trainer.total_training_step=3"],
        ["trainer.total_training_step is not a key", "did you mean trainer.total_training_steps"],
    ),
    (
        "trainer_workers_beyond_cpus_as_reported",  # the issue's own line: only n_gpus_per_node changed
        ["trainer.n_gpus_per_node=32"],
        ["trainer.nnodes=1 x trainer.n_gpus_per_node=32 needs 32"],
    ),
    # --- choices, registries and the support table (one per section) -------------------------------
    (
        "algorithm_unsupported_feature",
        ["algorithm.use_pf_ppo=True"],
        ["algorithm.use_pf_ppo=True is not supported by verl_lite: policy-filtered PPO is not available"],
    ),
    (  # verl 0.9.1's keys of features out of scope: accepted at verl's default, refused by name when set
        "verl09_out_of_scope_keys",
        [
            "distillation.enabled=True",
            f"{ARR}.rollout.disaggregation.enabled=True",
            f"{ARR}.actor._target_=my.ActorConfig",
        ],
        [
            "distillation.enabled=True is not supported by verl_lite: verl 0.9's distillation is not in "
            "verl_lite; leave it at False",
            f"{ARR}.rollout.disaggregation.enabled=True is not supported by verl_lite: verl 0.9's "
            "prefill/decode disaggregation",
            f"{ARR}.actor._target_=my.ActorConfig is not supported by verl_lite",
        ],
    ),
    (
        "data_tool_config_missing",
        ["data.tool_config_path=/tools.yaml"],
        ["data.tool_config_path='/tools.yaml' does not exist; point it at the YAML file"],
    ),
    ("data_truncation_choice", ["data.truncation=middle"], ["data.truncation='middle' is not one of"]),
    (
        "algorithm_unknown_estimator",
        ["algorithm.adv_estimator=nope"],
        ["algorithm.adv_estimator='nope' is not a known advantage estimator; choose one of ["],
    ),
    (
        "actor_unknown_policy_loss",
        [f"{ARR}.actor.policy_loss.loss_mode=nope"],
        [f"{ARR}.actor.policy_loss.loss_mode='nope' is not a known policy loss"],
    ),
    (
        "actor_loss_agg_choice",
        [f"{ARR}.actor.loss_agg_mode=nope"],
        [f"{ARR}.actor.loss_agg_mode='nope' is not one of"],
    ),
    (
        "model_lora_rank_negative",
        [f"{ARR}.model.lora_rank=-1"],
        [f"{ARR}.model.lora_rank=-1 must be 0 (full fine-tuning) or a positive LoRA rank"],
    ),
    (
        "reward_manager_unknown",
        ["reward_model.reward_manager=nope"],
        ["='nope' is not one of ['batch', 'dapo', 'gdpo', 'naive', 'prime']"],
    ),
    (
        "trainer_logger_choice",
        ["trainer.logger=[mlflow]"],
        [
            "trainer.logger=['mlflow'] is not supported by verl_lite: use any of console, file, wandb, tensorboard"
        ],
    ),
    ("trainer_device_choice", ["trainer.device=tpu"], ["trainer.device='tpu' is not one of"]),
    # --- data files ---------------------------------------------------------------------------------
    (
        "data_directory",
        ["data.train_files={d[folder]}"],
        ["data.train_files: '{d[folder]}' is a directory", "train.parquet"],
    ),
    (
        "data_missing",
        ["data.train_files={d[folder]}/nope.parquet"],
        ["data.train_files: '{d[folder]}/nope.parquet' does not exist"],
    ),
    ("data_empty_file", ["data.train_files={d[empty]}"], ["'{d[empty]}' is empty (0 bytes)"]),
    ("data_not_parquet", ["data.train_files={d[csv]}"], ["'{d[csv]}' is not a parquet file"]),
    (
        "data_truncated_parquet",
        ["data.train_files={d[truncated]}"],
        ["'{d[truncated]}' is truncated or not a parquet file"],
    ),
    ("data_no_prompt_column", ["data.train_files={d[no_prompt]}"], ["no column 'prompt'", "data.prompt_key"]),
    (
        "data_non_utf8",
        ["data.train_files={d[non_utf8]}"],
        ["{d[non_utf8]} row 2: column 'prompt' holds text that is not valid UTF-8"],
    ),
    (
        "data_zero_rows",
        ["data.train_files={d[zero_rows]}"],
        ["{d[zero_rows]}: the parquet file holds no rows"],
    ),
    (
        "data_emoji_prompt",
        ["data.train_files={d[emoji]}"],
        ["{d[emoji]} row 1: column 'prompt' has characters the tokenizer cannot represent"],
    ),
    (
        "data_batch_beyond_dataset",
        ["data.train_files={d[four]}"],
        ["data.train_batch_size=8 is larger than the 4 prompts of data.train_files=['{d[four]}']"],
    ),
    (
        "data_val_unknown_source",
        ["data.val_files={d[unknown_source]}"],
        ["data.val_files: no reward scorer for data_source ['my/task'] (e.g. {d[unknown_source]} row 0)"],
    ),
    (
        "data_all_filtered",
        ["data.train_files={d[overlong]}", "data.filter_overlong_prompts=True"],
        ["all 4 prompts are over data.max_prompt_length=16"],
    ),
    ("data_val_directory", ["data.val_files={d[folder]}"], ["data.val_files: '{d[folder]}' is a directory"]),
    # --- model folders ------------------------------------------------------------------------------
    (
        "model_missing",
        [f"{ARR}.model.path={{m[good]}}/nope"],
        [f"{ARR}.model.path='{{m[good]}}/nope': no such folder"],
    ),
    (
        "model_no_weights",
        [f"{ARR}.model.path={{m[no_weights]}}"],
        [f"{ARR}.model.path='{{m[no_weights]}}' has config.json but no weights"],
    ),
    (
        "model_truncated_safetensors",
        [f"{ARR}.model.path={{m[truncated]}}"],
        ["{m[truncated]}/model.safetensors' is truncated"],
    ),
    (
        "model_no_chat_template",
        [f"{ARR}.model.path={{m[no_template]}}"],
        [f"{ARR}.model.path='{{m[no_template]}}': the tokenizer has no chat template"],
    ),
    (
        "tokenizer_only_config",
        ["data.tokenizer={m[only_config]}"],
        ["data.tokenizer='{m[only_config]}' has no tokenizer files"],
    ),
    (
        "model_only_config",
        [f"{ARR}.model.path={{m[only_config]}}"],
        [
            f"{ARR}.model.path='{{m[only_config]}}' has config.json but no weights",
            f"{ARR}.model.path='{{m[only_config]}}' has no tokenizer files",
        ],
    ),
    (
        "tokenizer_beyond_vocab",
        [f"{ARR}.model.path={{m[small_vocab]}}"],
        ["has token ids up to 114, beyond the model's vocabulary", "vocab_size=50"],
    ),
    (
        "lengths_beyond_positions",
        [f"{ARR}.model.path={{m[short_positions]}}"],
        ["16 + 8 = 24 tokens is longer than the model's 20 positions", "{m[short_positions]}"],
    ),
    (
        "model_weight_renamed",  # the layer would train from its random init, exit 0
        [f"{ARR}.model.path={{m[renamed_weight]}}"],
        [
            f"{ARR}.model.path='{{m[renamed_weight]}}': weight model.layers.0.mlp.up_proj.weight is missing "
            "from {m[renamed_weight]}/model.safetensors; it has ['model.layers.0.mlp.up_prooj.weight'] instead"
        ],
    ),
    (
        "model_weight_reshaped",
        [f"{ARR}.model.path={{m[reshaped_weight]}}"],
        [
            "weight model.layers.0.mlp.up_proj.weight in {m[reshaped_weight]}/model.safetensors has shape "
            "[128, 384], the model its config.json describes expects [384, 128]"
        ],
    ),
    (
        "model_config_invalid_json",
        [f"{ARR}.model.path={{m[bad_json]}}"],
        ["'{m[bad_json]}/config.json' is not valid JSON (Expecting ',' delimiter at line 3 column 3)"],
    ),
    (
        "model_type_unknown",
        [f"{ARR}.model.path={{m[unknown_model_type]}}"],
        [
            f"{ARR}.model.path='{{m[unknown_model_type]}}': config.json's model_type='qwen9' is not a model "
            "type transformers",
            "did you mean [",
            "'qwen2'",
        ],
    ),
    (
        "vllm_architecture_unknown",
        [*VLLM, f"{ARR}.model.path={{m[unknown_arch]}}"],
        [
            f"{ARR}.model.path: config.json's architectures ['NoSuchForCausalLM'] are not models vLLM runs",
            f"use {ARR}.rollout.name=hf",
        ],
    ),
    (
        "chat_template_sandbox",
        [f"{ARR}.model.path={{m[sandboxed_template]}}"],
        [
            "row 0: the chat template of {m[sandboxed_template]} fails on this row: SecurityError: access to "
            "attribute '__class__' of 'str' object is unsafe"
        ],
    ),
    (
        "lora_target_matches_nothing",  # only q_proj would be adapted, and the run would train on
        [f"{ARR}.model.lora_rank=8", f"{ARR}.model.target_modules=[q_proj,v_prooj]"],
        [f"{ARR}.model.target_modules: ['v_prooj'] match no module of the model", "did you mean ['v_proj']?"],
    ),
    # --- the command line and the cluster ----------------------------------------------------------
    (
        "config_unresolvable_interpolation",
        ["trainer.project_name=${{no_such.key}}"],
        ["trainer.project_name='${{no_such.key}}': Interpolation key 'no_such.key' not found"],
    ),
    (
        "hydra_parse_non_ascii_path",
        ["data.train_files=/tmp/dätä/train.parquet"],
        [
            "data.train_files=/tmp/dätä/train.parquet: Hydra cannot parse this override",
            """needs quotes: 'data.train_files="/tmp/dätä/train.parquet"'""",
        ],
    ),
    (
        "ray_address_nothing_answers",  # ray.init would wait for it until killed
        ["ray_kwargs.ray_init.address=127.0.0.1:1"],
        ["ray_kwargs.ray_init.address='127.0.0.1:1': nothing answers at 127.0.0.1:1 (Connection refused"],
    ),
    # --- checkpoints (trainer.resume_from_path) -----------------------------------------------------
    (
        "ckpt_missing_folder",
        ["trainer.resume_from_path={c[good]}_nope"],
        ["trainer.resume_from_path: checkpoint folder '{c[good]}_nope' does not exist"],
    ),
    (
        "ckpt_deleted_shard",
        ["trainer.resume_from_path={c[deleted_shard]}"],
        [
            "trainer.resume_from_path: checkpoint '{c[deleted_shard]}' is damaged",
            "actor/model/__0_0.distcp is missing",
        ],
    ),
    (
        "ckpt_truncated_shard",
        ["trainer.resume_from_path={c[truncated_shard]}"],
        ["is damaged", "actor/model/__0_0.distcp is 100 bytes"],
    ),
    (
        "ckpt_truncated_shard_old",  # trusted without a manifest, DCP's metadata still finds the cut
        ["trainer.resume_from_path={c[truncated_shard_no_manifest]}", "trainer.resume_without_manifest=True"],
        ["shard {c[truncated_shard_no_manifest]}/actor/model/__0_0.distcp is truncated: 100 bytes"],
    ),
    (
        "ckpt_manifest_deleted",
        ["trainer.resume_from_path={c[no_manifest]}"],
        [
            "trainer.resume_from_path: checkpoint '{c[no_manifest]}' has no manifest.json, so its files cannot "
            "be verified",
            "set trainer.resume_without_manifest=True to trust this one",
        ],
    ),
    (
        "ckptauto_manifest_deleted",
        ["trainer.resume_mode=auto", "trainer.default_local_dir={c[no_manifest_run]}"],
        ["checkpoint '{c[no_manifest_run]}/global_step_1' has no manifest.json"],
    ),
    (
        "ckpt_data_pt_of_another_step",
        ["trainer.resume_from_path={c[absurd_step]}"],
        [
            "trainer.resume_from_path: {c[absurd_step]}/data.pt says global_step=1000000, but its folder is step 1",
        ],
    ),
    (
        "ckpt_unsafe_data_pt",
        ["trainer.resume_from_path={c[unsafe_data]}"],
        ["refusing to load {c[unsafe_data]}/data.pt"],
    ),
    (
        "ckpt_unsafe_extra_state",
        ["trainer.resume_from_path={c[unsafe_extra]}"],
        ["refusing to load {c[unsafe_extra]}/actor/extra_state_world_size_2_rank_1.pt"],
    ),
    (
        "ckpt_unsafe_metadata",
        ["trainer.resume_from_path={c[unsafe_metadata]}"],
        ["refusing to load {c[unsafe_metadata]}/actor/model/.metadata"],
    ),
    *[
        (
            f"ckpt_metadata_{kind}",
            [f"trainer.resume_from_path={{c[metadata_{kind}]}}"],
            [f"trainer.resume_from_path: refusing to load {{c[metadata_{kind}]}}/actor/model/.metadata"],
        )
        for kind in sorted(METADATA_PAYLOADS)
    ],
    (
        "ckpt_metadata_wrong_type",
        ["trainer.resume_from_path={c[metadata_wrong_type]}"],
        [
            "refusing to load {c[metadata_wrong_type]}/actor/optimizer/.metadata",
            "it unpickles to a builtins.dict, not a DCP Metadata",
        ],
    ),
    (
        "ckptauto_crafted_metadata",
        ["trainer.resume_mode=auto", "trainer.default_local_dir={c[auto_run]}"],
        [
            "trainer.resume_mode=auto (latest_checkpointed_iteration.txt in trainer.default_local_dir): "
            "refusing to load {c[auto_run]}/global_step_1/actor/model/.metadata",
            "dotted name torch.distributed.checkpoint.filesystem.os.system",
        ],
    ),
    (
        "ckpt_zeroed_4k_in_shard",  # the size is unchanged: only the content hash tells
        ["trainer.resume_from_path={c[zeroed_shard]}"],
        [
            "trainer.resume_from_path: checkpoint '{c[zeroed_shard]}' is damaged",
            "actor/model/__0_0.distcp has changed since it was saved",
        ],
    ),
    (
        "ckptauto_linked_step_outside_the_run",
        ["trainer.resume_mode=auto", "trainer.default_local_dir={c[linked_run]}"],
        [
            "trainer.resume_mode=auto: {c[linked_run]}/global_step_1",
            "is a symbolic link to {c[good]}, outside trainer.default_local_dir; refusing to follow it",
        ],
    ),
    (
        "trainer_saves_into_a_folder_with_a_linked_step",
        ["trainer.default_local_dir={c[linked_run]}", "trainer.save_freq=1"],
        [
            "trainer.default_local_dir: {c[linked_run]}/global_step_1 is a symbolic link to {c[good]} "
            "(outside the run folder); this run saves there"
        ],
    ),
    (
        "trainer_local_dir_is_a_file",
        ["trainer.default_local_dir={d[good]}", "trainer.save_freq=1"],
        ["trainer.default_local_dir='{d[good]}' is a file, not a folder"],
    ),
    (
        "trainer_local_dir_not_writable",  # sysfs: no file can be created there, not even by root
        ["trainer.default_local_dir=/sys/kernel/verl_lite_run", "trainer.logger=[console,file]"],
        [
            "trainer.default_local_dir='/sys/kernel/verl_lite_run' cannot be created: /sys/kernel is not writable"
        ],
    ),
    (
        "trainer_rollout_data_dir_is_a_file",
        ["trainer.rollout_data_dir={d[good]}"],
        ["trainer.rollout_data_dir='{d[good]}' is a file, not a folder"],
    ),
    (
        "ckpt_from_a_model_of_another_size",
        ["trainer.resume_from_path={c[other_size]}"],
        [
            "trainer.resume_from_path: the checkpoint's actor was saved from a model of another size than "
            f"{ARR}.model.path=",
            "hidden_size 256 there, 128 here; num_hidden_layers 4 there, 2 here",
        ],
    ),
    (
        "ckptauto_corrupt_tracker",
        ["trainer.resume_mode=auto", "trainer.default_local_dir={c[corrupt_tracker_run]}"],
        [
            "{c[corrupt_tracker_run]}/latest_checkpointed_iteration.txt is corrupt: it holds bytes that are not "
            "text",
            "delete it to start afresh",
        ],
    ),
    # --- the reward function file ---------------------------------------------------------------------
    (
        "reward_file_syntax_error",
        ["custom_reward_function.path={r[syntax]}"],
        ["custom_reward_function.path='{r[syntax]}' has a syntax error at line 2"],
    ),
    (
        "reward_file_import_error",
        ["custom_reward_function.path={r[imports]}"],
        ["custom_reward_function.path='{r[imports]}' fails to import: ModuleNotFoundError"],
    ),
    (
        "reward_file_exits_at_import",
        ["custom_reward_function.path={r[exits]}"],
        [
            "custom_reward_function.path='{r[exits]}' called sys.exit(0) when imported, which would end the run"
        ],
    ),
    (
        "reward_file_is_directory",
        ["custom_reward_function.path={r[dir]}"],
        ["custom_reward_function.path='{r[dir]}' is a directory"],
    ),
    (
        "reward_function_missing",
        ["custom_reward_function.path={r[good]}", "custom_reward_function.name=nope"],
        ["custom_reward_function.name='nope': no such function in {r[good]}", "compute_score"],
    ),
    (  # verl calls it with extra_info=...: it would fail there at its first sample
        "reward_function_without_extra_info",
        ["custom_reward_function.path={r[no_extra_info]}"],
        [
            "custom_reward_function.name='compute_score' in {r[no_extra_info]} is "
            "`compute_score(data_source, solution_str, ground_truth)`, which cannot take verl's call",
            "got an unexpected keyword argument 'extra_info'",
        ],
    ),
    (  # verl 0.9's spelling of the function's own keywords reaches the same check
        "reward_kwargs_the_function_cannot_take",
        ["custom_reward_function.path={r[good]}", "+reward.custom_reward_function.reward_kwargs.bonus=2"],
        [
            "plus custom_reward_function.reward_kwargs ['bonus']",
            "got an unexpected keyword argument 'bonus'",
        ],
    ),
]
CKPT_CASES = ("ckpt_",)
# several problems reported, one line each: no weights and no tokenizer files; three verl 0.9 keys
SEVERAL = {"model_only_config": 2, "verl09_out_of_scope_keys": 3}


@pytest.fixture(scope="session")
def bad(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_inputs")
    marker = str(root / "PICKLE_RAN")
    register_payload_extension()  # reduce_extension_code's code stands for os.system in this process
    rewards = root / "rewards"
    (rewards / "dir").mkdir(parents=True)
    files = {
        "syntax": "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return (\n",
        "imports": "import no_such_module_xyz\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n",
        "good": "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n",
        "no_extra_info": "def compute_score(data_source, solution_str, ground_truth):\n    return 0.0\n",
        "exits": "import sys\n\nsys.exit(0)\n",
    }
    for name, text in files.items():
        (rewards / f"{name}.py").write_text(text)
    paths = {
        "d": build_data_files(root / "data"),
        "m": build_model_folders(root / "models"),
        "c": damaged_checkpoints(root / "ckpt", marker),
        "r": {name: str(rewards / f"{name}.py") for name in files} | {"dir": str(rewards / "dir")},
    }
    return paths | {"marker": marker, "root": root}


def _compose(overrides: list[str], config_name: str = "demo"):
    return compose_config(overrides, config_name)


def _no_ray(cfg):
    raise AssertionError("bad input reached Ray: it must be refused before Ray starts")


def run_in_process(
    overrides: list[str], monkeypatch, capsys, config_name: str = "demo"
) -> tuple[int, str, float]:
    """(exit status, the stderr line(s) of verl_lite, seconds) of the CLI on these overrides: the argv
    check main_ppo's `__main__` makes before Hydra (verl's '+' spellings, unknown keys), then main_ppo.run.
    config_name: `--config-name` (the bare command's is verl's ppo_trainer)."""
    monkeypatch.setattr(main_ppo, "start_ray", _no_ray)
    import ray

    # a fresh CLI process is connected to no Ray (a session fixture of an earlier test may be)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    start = time.perf_counter()
    try:
        overrides = normalize_argv(overrides)
    except OverrideError as e:  # main_ppo's `__main__`: this line, exit 2
        return 2, f"verl_lite: {e}", time.perf_counter() - start
    config = _compose(overrides, config_name)
    with pytest.raises(SystemExit) as info:
        main_ppo.run(config)
    seconds = time.perf_counter() - start
    err = capsys.readouterr().err
    message = err[err.index("verl_lite: ") :] if "verl_lite: " in err else err
    return info.value.code, message.strip(), seconds


@pytest.mark.parametrize("case, overrides, fragments", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_before_ray_with_one_line(
    case, overrides, fragments, bad, tmp_path, monkeypatch, capsys
):
    fill = {k: v for k, v in bad.items() if k in "dmcr"}
    overrides = [o.format(**fill) for o in overrides]
    own_dir = any(o.startswith("trainer.default_local_dir=") for o in overrides)
    run_dir = [] if own_dir else [f"trainer.default_local_dir={tmp_path}/run"]
    if case.startswith(CKPT_CASES):
        run_dir += ["trainer.resume_mode=resume_path"]
    code, message, seconds = run_in_process([*BASE, *run_dir, *overrides], monkeypatch, capsys)
    assert code == 2, message
    lines = message.splitlines()
    if case in SEVERAL:  # several problems in one input: a heading, then one line each
        assert lines[0] == "verl_lite: invalid input:" and len(lines) == 1 + SEVERAL[case], message
        assert all(line.startswith("  - ") for line in lines[1:]), message
    else:
        assert message.startswith("verl_lite: ") and len(lines) == 1, f"one line expected:\n{message}"
    for fragment in fragments:
        assert fragment.format(**fill) in message, message
    assert "Traceback" not in message
    assert not payload_ran(bad["marker"]), "a crafted pickle in the checkpoint was executed"
    assert seconds < 30, f"start-up refusal took {seconds:.1f}s"


# (id, environment ({d}: data files, {tmp}: the test's folder; None: unset), overrides, fragments)
ENV_CASES = [
    (
        "wandb_without_an_api_key",  # wandb.init would stop the run to ask for one
        {"WANDB_MODE": None, "WANDB_API_KEY": None, "NETRC": "{tmp}/netrc", "WANDB_CONFIG_DIR": "{tmp}"},
        ["trainer.logger=[console,wandb]"],
        [
            "trainer.logger includes wandb, but no W&B API key for api.wandb.ai was found",
            "WANDB_MODE=offline",
        ],
    ),
    (
        "ray_address_env_nothing_answers",
        {"RAY_ADDRESS": "127.0.0.1:1"},
        [],
        ["RAY_ADDRESS='127.0.0.1:1': nothing answers at 127.0.0.1:1"],
    ),
    (
        "asset_cache_is_a_file",
        {"VERL_LITE_CACHE": "{d[good]}"},
        [],
        ["VERL_LITE_CACHE='{d[good]}' cannot hold the embedded verl_lite:// assets (Not a directory"],
    ),
]


@pytest.mark.parametrize("case, env, overrides, fragments", ENV_CASES, ids=[c[0] for c in ENV_CASES])
def test_bad_environment_fails_before_ray_with_one_line(
    case, env, overrides, fragments, bad, tmp_path, monkeypatch, capsys
):
    fill = {"d": bad["d"], "tmp": str(tmp_path)}
    for name, value in env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value.format(**fill))
    run_dir = [f"trainer.default_local_dir={tmp_path}/run"]
    code, message, _ = run_in_process([*BASE, *run_dir, *overrides], monkeypatch, capsys)
    assert code == 2 and message.startswith("verl_lite: ") and len(message.splitlines()) == 1, message
    for fragment in fragments:
        assert fragment.format(**fill) in message, message


@pytest.mark.parametrize(
    "code_text, said",
    [
        ('raise RuntimeError("boom at import")\n', "fails to import: RuntimeError: boom at import"),
        ("import sys\nsys.exit(0)\n", "({lib}) called sys.exit(0) when imported, which would end the run"),
    ],
    ids=["raises", "exits"],
)
def test_an_external_lib_that_raises_or_exits_on_import_is_one_line_before_ray(
    code_text, said, tmp_path, monkeypatch, capsys
):
    """Start-up builds the model's config, importing model.external_lib as the workers do: a module
    that raises, or calls sys.exit() (which would end the run with its status, unexplained), is named
    in one line with its error (and file), not its traceback."""
    name = f"lib_xyz_{tmp_path.name}"  # a module name of its own: a failed import leaves nothing cached
    (tmp_path / f"{name}.py").write_text(code_text)
    monkeypatch.syspath_prepend(str(tmp_path))
    overrides = [*BASE, f"trainer.default_local_dir={tmp_path}/run", f"{ARR}.model.external_lib={name}"]
    code, message, _ = run_in_process(overrides, monkeypatch, capsys)
    assert code == 2 and message.startswith("verl_lite: ") and len(message.splitlines()) == 1, message
    assert f"{ARR}.model.external_lib='{name}' " + said.format(lib=tmp_path / f"{name}.py") in message, (
        message
    )


def test_both_kl_terms_are_announced_once(tmp_path, monkeypatch, capsys):
    """use_kl_loss with use_kl_in_reward: both apply (verl says so too), said once at start-up."""
    overrides = [
        *BASE,
        f"trainer.default_local_dir={tmp_path}/run",
        f"{ARR}.actor.use_kl_loss=True",
        "algorithm.use_kl_in_reward=True",
    ]
    monkeypatch.setattr(main_ppo, "start_ray", lambda cfg: _stop())
    with pytest.raises(_Reached):
        main_ppo.run(_compose(overrides))
    out = capsys.readouterr().out
    assert out.count("both KL terms apply, as in verl") == 1, out


@pytest.mark.parametrize("exclude", ["DONT_EXCLUDE", "[down_prj]"])
def test_an_exclude_list_matching_nothing_warns_and_runs_as_in_verl(exclude, tmp_path, monkeypatch, capsys):
    """verl's LoRA CI steps set exclude_modules=DONT_EXCLUDE (exclude nothing) and PEFT only warns when an
    exclusion matches nothing: the run goes on, and says once which entries exclude nothing (a typo shows
    there, with the closest module name)."""
    overrides = [
        *BASE,
        f"trainer.default_local_dir={tmp_path}/run",
        f"{ARR}.model.lora_rank=8",
        f"{ARR}.model.exclude_modules={exclude}",
    ]
    monkeypatch.setattr(main_ppo, "start_ray", lambda cfg: _stop())
    with pytest.raises(_Reached):
        main_ppo.run(_compose(overrides))
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert out.count(f"{ARR}.model.exclude_modules:") == 1, out
    assert "match no module of the model" in out and "nothing is excluded (as in verl)" in out, out


def test_a_checkpoint_without_manifest_is_trusted_when_the_key_says_so(bad, tmp_path, monkeypatch, capsys):
    """trainer.resume_without_manifest=True: a folder whose manifest is gone (or that predates them)
    passes every start-up check and the run reaches Ray (the refusal without the key: the table)."""
    overrides = [
        *BASE,
        f"trainer.default_local_dir={tmp_path}/run",
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={bad['c']['no_manifest']}",
        "trainer.resume_without_manifest=True",
    ]
    reached = []
    monkeypatch.setattr(main_ppo, "start_ray", lambda cfg: reached.append(True) or _stop())
    with pytest.raises(_Reached):
        main_ppo.run(_compose(overrides))
    assert reached == [True]


def test_good_inputs_pass_every_start_up_check(bad, tmp_path, monkeypatch, capsys):
    """The undamaged originals of the table's files pass: each case fails for its own damage only."""
    d, m, c, r = bad["d"], bad["m"], bad["c"], bad["r"]
    overrides = [
        *BASE,
        f"trainer.default_local_dir={tmp_path}/run",
        f"data.train_files={d['good']}",
        f"data.val_files={d['good_val']}",
        f"{ARR}.model.path={m['good']}",
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={c['good']}",
        f"custom_reward_function.path={r['good']}",
    ]
    reached = []
    monkeypatch.setattr(main_ppo, "start_ray", lambda cfg: reached.append(True) or _stop())
    with pytest.raises(_Reached):
        main_ppo.run(_compose(overrides))
    assert reached == [True]


def test_a_null_rollout_correction_section_is_verls_off_and_passes_start_up(tmp_path, monkeypatch, capsys):
    """`algorithm.rollout_correction=null` is verl's way to turn the section off: accepted, read as the
    section's defaults (every option off), and the run reaches Ray."""
    overrides = [*BASE, f"trainer.default_local_dir={tmp_path}/run", "algorithm.rollout_correction=null"]
    reached = []
    monkeypatch.setattr(main_ppo, "start_ray", lambda cfg: reached.append(cfg) or _stop())
    with pytest.raises(_Reached):
        main_ppo.run(_compose(overrides))
    rc = reached[0].algorithm.rollout_correction
    assert (rc.rollout_is, rc.rollout_rs, rc.bypass_mode) == (None, None, False), rc


class _Reached(Exception):
    pass


def _stop():
    raise _Reached()


def test_cluster_without_room_is_refused_after_joining_before_workers(
    ray_local, tmp_path, monkeypatch, capsys
):
    """A cluster joined by address is only known once joined: checked then, before any worker starts."""
    from verl_lite.trainer.ppo_trainer import RayPPOTrainer

    cpus = int(ray_local.cluster_resources()["CPU"])

    def no_workers(self):
        raise AssertionError("workers started on a cluster without room for them")

    monkeypatch.setattr(RayPPOTrainer, "init_workers", no_workers)
    overrides = [
        *BASE,
        f"trainer.default_local_dir={tmp_path}/run",
        "ray_kwargs.ray_init.address=auto",  # joins: the local check is skipped, the cluster's applies
        f"trainer.n_gpus_per_node={cpus + 2}",
        f"data.train_batch_size={(cpus + 2) * 4}",
        f"{ARR}.actor.ppo_mini_batch_size={(cpus + 2) * 4}",
    ]
    with pytest.raises(SystemExit) as info:
        main_ppo.run(_compose(overrides))
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert (
        f"trainer.n_gpus_per_node={cpus + 2} needs {cpus + 2} CPUs" in err
        and "the cluster's 1 node(s)" in err
    )


def test_a_failed_phase_is_reported_as_one_line_with_exit_2(tmp_path, monkeypatch, capsys):
    """A WorkerError's long form (Ray's multi-line text, the remote traceback) goes to the log; the
    user gets its first line, as for start-up errors (test_faults.py kills a real worker)."""
    from verl_lite.single_controller import WorkerError

    def dies(cfg, links=None):
        raise WorkerError(
            "trainer phase 'update_actor' at step 2 failed: actor_rollout_ref rank 1 died during update_actor: "
            "The actor died unexpectedly before finishing this task.\n\tclass_name: ActorRolloutRefWorker"
        )

    monkeypatch.setattr(main_ppo, "run_ppo", dies)
    with pytest.raises(SystemExit) as info:
        main_ppo.run(_compose([*BASE, f"trainer.default_local_dir={tmp_path}/run"]))
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("verl_lite: ")]
    assert info.value.code == 2 and len(lines) == 1
    assert lines[0].endswith(
        "rank 1 died during update_actor: The actor died unexpectedly before finishing this task."
    )


# A reward function that fails on row 2 of the data file, in each way the issue lists.
REWARD_FAILURES = [
    ("raises", "raise ZeroDivisionError('no score for this one')", "raised ZeroDivisionError: no score"),
    ("returns_none", "return None", "returned None for"),
    ("returns_nan", "return float('nan')", "returned nan for"),
    ("returns_string", "return 'yes'", "returned 'yes' for"),
    ("calls_sys_exit", "__import__('sys').exit()", "called sys.exit(None)"),
    ("calls_sys_exit_0", "__import__('sys').exit(0)", "called sys.exit(0)"),
    ("beyond_float_range", "return 10 ** 400", "returned an integer of 401 digits for"),
    ("returns_inf", "return float('inf')", "returned inf for"),
    (
        "never_returns",
        "while True:\n            pass",
        "did not finish the batch within reward_model.timeout=1.0 s",
    ),
]


def _reward_step(cfg, links=None):
    """main_ppo.run_ppo up to the first step's reward phase, without Ray: the real trainer (built by
    main_ppo.build_trainer, with its reward manager and data file), the real phase wrapper and
    reward phase, on the first 4 prompts answered "7" (generation needs workers; it is not what is
    tested here: the slow CLI test below runs the whole step)."""
    trainer = main_ppo.build_trainer(cfg)
    tok = trainer.tokenizer
    answer = tok("7")["input_ids"] + [tok.eos_token_id]
    width = cfg.actor_rollout_ref.rollout.response_length
    batch = trainer.train_dataset.collate([0, 1, 2, 3])
    responses = torch.full((len(batch), width), tok.pad_token_id)
    responses[:, : len(answer)] = torch.tensor(answer)
    mask = (torch.arange(width) < len(answer)).long().expand(len(batch), width)

    def generate(batch, metrics):
        return batch.union(DataProto.from_dict({"responses": responses, "response_mask": mask}))

    trainer.phases = [("generate", generate), ("reward", trainer.step_phases._reward)]
    trainer.global_steps = 1
    trainer.train_step(batch)
    raise AssertionError("the reward phase passed a failing reward function")


@pytest.mark.parametrize("case, body, says", REWARD_FAILURES, ids=[c[0] for c in REWARD_FAILURES])
def test_a_failing_reward_function_ends_the_run_in_one_line(
    case, body, says, bad, tmp_path, monkeypatch, capsys
):
    """Exit 2 and one line naming step, phase, function and file, the data file and row, data_source."""
    reward = tmp_path / "reward.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if extra_info['index'] == 2:\n"
        f"        {body}\n"
        "    return 0.0\n"
    )
    data = bad["d"]["four"]
    overrides = [
        *BASE,
        f"trainer.default_local_dir={tmp_path}/run",
        f"data.train_files={data}",
        "data.train_batch_size=4",
        f"custom_reward_function.path={reward}",
        "reward_model.timeout=1",
    ]
    monkeypatch.setattr(main_ppo, "run_ppo", _reward_step)
    with pytest.raises(SystemExit) as info:
        main_ppo.run(_compose(overrides))
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("verl_lite: ")]
    assert info.value.code == 2 and len(lines) == 1, lines
    for fragment in [
        "trainer phase 'reward' at step 1 failed",
        f"compute_score ({reward})",
        says,
        f"{data} row 2",
        "data_source='verl_lite/arith'",
    ]:
        assert fragment in lines[0], lines[0]


# the runs whose subject is the reward function (called on the driver) need one worker, not two
ONE_WORKER = [o.replace("trainer.n_gpus_per_node=2", "trainer.n_gpus_per_node=1") for o in BASE]


def _cli_cmd(tmp_path, *overrides, base=BASE, run_dir=True) -> list[str]:
    """The demo's CLI command with `overrides` (its output folder under tmp_path unless run_dir=False)."""
    cmd = [
        sys.executable,
        "-m",
        "verl_lite.main_ppo",
        "--config-name",
        "demo",
        f"hydra.run.dir={tmp_path}/hydra",
    ]
    return [*cmd, *base, *([f"trainer.default_local_dir={tmp_path}/run"] if run_dir else []), *overrides]


def _cli(tmp_path, *overrides, timeout=600, base=BASE):
    cmd = _cli_cmd(tmp_path, *overrides, base=base, run_dir=False)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ))


@pytest.mark.slow
def test_cli_process_exits_2_with_one_line_before_ray(bad, tmp_path):
    proc = _cli(
        tmp_path, f"trainer.default_local_dir={tmp_path}/run", f"data.train_files={bad['d']['folder']}"
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("verl_lite: ")]
    assert len(lines) == 1 and "is a directory" in lines[0], proc.stderr[-3000:]
    assert "Started a local Ray" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


def test_cli_value_of_the_wrong_type_exits_2_with_one_line(tmp_path):
    """Hydra's composition refuses it (seven lines and exit 1 of its own): one line, exit 2."""
    proc = _cli(tmp_path, "trainer.total_epochs=abc", timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        "verl_lite: trainer.total_epochs=abc: Value 'abc' of type 'str' could not be converted to Integer; "
        "give it a whole number"
    ]


@pytest.mark.slow
def test_reward_function_failing_mid_run_ends_it_like_a_start_up_error(bad, tmp_path):
    """A reward function that raises on one row: exit 2, one line naming step, phase, function and
    its file, the parquet file and row, and the data_source."""
    reward = tmp_path / "reward.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if extra_info['index'] == 3:\n"
        "        raise ZeroDivisionError('no score for this one')\n"
        "    return 0.0\n"
    )
    data = bad["d"]["four"]
    proc = _cli(
        tmp_path,
        f"trainer.default_local_dir={tmp_path}/run",
        f"data.train_files={data}",
        "data.train_batch_size=4",
        "data.val_files=null",
        "data.shuffle=False",
        f"custom_reward_function.path={reward}",
        base=ONE_WORKER,
    )
    assert proc.returncode == 2, proc.stderr[-4000:]
    line = [x for x in proc.stderr.splitlines() if x.startswith("verl_lite: ")][-1]
    for fragment in [
        "trainer phase 'reward' at step 1 failed",
        f"compute_score ({reward})",
        "raised ZeroDivisionError: no score for this one",
        f"{data} row 3",
        "data_source='verl_lite/arith'",
    ]:
        assert fragment in line, line


def _console_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("verl_lite: ")]


@pytest.mark.slow
def test_a_finished_run_exits_past_a_reward_thread_and_leaves_no_process(tmp_path):
    """A reward function that leaves a non-daemon thread running: the driver still exits when
    training is done (exit 0, the thread named); both KL terms are announced once; no process the
    run started outlives it."""
    reward = tmp_path / "reward.py"
    reward.write_text(
        "import threading, time\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if not any(t.name == 'left_behind' for t in threading.enumerate()):\n"
        "        threading.Thread(target=time.sleep, args=(3600,), name='left_behind').start()\n"
        "    return 0.0\n"
    )
    run = run_watched(
        _cli_cmd(
            tmp_path,
            f"custom_reward_function.path={reward}",
            f"{ARR}.actor.use_kl_loss=True",
            base=ONE_WORKER,
        )
        + ["algorithm.use_kl_in_reward=True"],
        timeout=400,
    )
    kill_survivors(run.survivors)
    assert run.returncode == 0, run.output[-4000:]
    lines = _console_lines(run.output)
    assert (
        len(lines) == 1
        and "non-daemon thread(s) started during it are still running ('left_behind'" in lines[0]
    )
    assert run.output.count("both KL terms apply, as in verl") == 1, run.output[-4000:]
    assert "step 1/1" in run.output and not run.survivors, run.survivors


@pytest.mark.slow
def test_a_reward_stuck_in_c_code_ends_the_run_and_every_process(tmp_path):
    """A catastrophic regular expression holds the GIL: the deadline cannot interrupt it, the
    backstop ends the driver, and the guard says why in one line and ends every process the run
    started (Ray's agents outlived the driver before)."""
    reward = tmp_path / "reward.py"
    reward.write_text(
        "import re\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    re.match(r'(a+)+$', 'a' * 64 + 'b')\n"
        "    return 0.0\n"
    )
    run = run_watched(
        _cli_cmd(
            tmp_path, f"custom_reward_function.path={reward}", "reward_model.timeout=2", base=ONE_WORKER
        ),
        timeout=400,
    )
    kill_survivors(run.survivors)
    assert run.returncode != 0 and not run.survivors, (run.survivors, run.output[-3000:])
    lines = _console_lines(run.output)
    assert len(lines) == 1, run.output[-3000:]
    assert (
        f"reward function compute_score ({reward}) did not return within reward_model.timeout=2.0 s"
        in lines[0]
    )
    assert "Traceback" not in run.output and "Timeout (" not in run.output, run.output[-3000:]
    assert "Timeout (" in (tmp_path / "hydra" / "main_ppo.log").read_text()  # the stacks, for debugging


@pytest.mark.slow
def test_a_full_disk_at_save_is_one_line_naming_the_folder(tmp_path):
    """A real full disk: a 256 KB tmpfs as trainer.default_local_dir (the tiny model's shards are
    larger). One line with "No space left on device" and the folder; no worker traceback; and the
    partial temp folder is removed (what the folder holds after the run is listed from inside the
    private mount, which ends with the command)."""
    full = tmp_path / "full"
    full.mkdir()
    cli = _cli_cmd(tmp_path, f"trainer.default_local_dir={full}/run", "trainer.save_freq=1")
    listing = '"$@"; status=$?; echo "LEFT: $(ls -A "$0")"; exit $status'
    cmd = small_filesystem(str(full), "256k", ["sh", "-c", listing, f"{full}/run", *cli])
    if cmd is None:
        pytest.skip("this machine allows no private mount (unshare -m / -Urm) for a small filesystem")
    run = run_watched(cmd, timeout=400)
    kill_survivors(run.survivors)
    assert run.returncode == 2, run.output[-4000:]
    lines = _console_lines(run.output)
    assert len(lines) == 1, run.output[-4000:]
    assert "trainer phase 'save_checkpoint' at step 1 failed" in lines[0]
    assert (
        f"No space left on device while writing the checkpoint into {full}/run/.tmp_global_step_1/"
        in lines[0]
    )
    assert "Traceback" not in run.output and "ray::" not in run.output, run.output[-4000:]
    assert not run.survivors, run.survivors
    left = [line for line in run.output.splitlines() if line.startswith("LEFT: ")]
    assert left == ["LEFT: "], left  # no .tmp_global_step_1 filling the disk
