"""Schema sections for tests that build engines, rollouts and workers directly.

The schema's defaults are verl's (bf16 compute and rollout, remove-padding and gradient
checkpointing on, no micro-batch size, `${...}` links that only resolve inside a whole composed
config). A test that builds a section on its own takes it from here instead: every value it
depends on is set explicitly, at the embedded demo's values (fp32 on CPU, its sizes). Plain
dataclasses, no OmegaConf, so the GPU machine (no Hydra there) can use them too.
"""

from __future__ import annotations

from verl_lite.config.schema import (
    ActorConfig,
    CheckpointConfig,
    CriticConfig,
    CriticModelConfig,
    FSDPConfig,
    MixedPrecisionConfig,
    ModelConfig,
    OptimConfig,
    RewardModelModelConfig,
    RolloutConfig,
)

CONTENTS = ["model", "optimizer", "extra"]


def fp32_fsdp(**changes) -> FSDPConfig:
    """FSDP2 in fp32 throughout (bf16 is ~10x slower on these CPUs and ~6e-3 off)."""
    mp = MixedPrecisionConfig(param_dtype="fp32", reduce_dtype="fp32", buffer_dtype="fp32")
    return FSDPConfig(**{"mixed_precision": mp, "model_dtype": "fp32", **changes})


def tiny_model(path: str, **changes) -> ModelConfig:
    """A model section: padded forwards, no gradient checkpointing, unless `changes` say so."""
    return ModelConfig(
        **{"path": path, "enable_gradient_checkpointing": False, "use_remove_padding": False, **changes}
    )


def checkpoint(contents: list[str] | None = None) -> CheckpointConfig:
    contents = list(contents or CONTENTS)
    return CheckpointConfig(save_contents=contents, load_contents=list(contents))


def tiny_optim(**changes) -> OptimConfig:
    return OptimConfig(**{"lr": 1e-4, "lr_scheduler_type": "constant", **changes})


def tiny_actor(**changes) -> ActorConfig:
    """The demo's actor section: 16 prompts per mini-batch, micro-batches of 32, fp32."""
    values = {
        "ppo_mini_batch_size": 16,
        "ppo_micro_batch_size_per_gpu": 32,
        "fsdp_config": fp32_fsdp(),
        "optim": tiny_optim(),
        "checkpoint": checkpoint(),
        "grad_clip": 1.0,
        "rollout_n": 8,
        "use_fused_kernels": False,
        "use_remove_padding": False,
    }
    return ActorConfig(**{**values, **changes})


def tiny_rollout(**changes) -> RolloutConfig:
    """The demo's rollout section with every link resolved: fp32 weights, 16 + 8 tokens, eager vLLM."""
    values = {
        "mode": "sync",
        "n": 8,
        "dtype": "fp32",
        "prompt_length": 16,
        "response_length": 8,
        "log_prob_micro_batch_size_per_gpu": 64,
        "log_prob_use_dynamic_bsz": False,
        "log_prob_max_token_len_per_gpu": 16384,
        "enforce_eager": True,
        "tensor_model_parallel_size": 1,
        "max_num_seqs": 1024,
        "update_weights_bucket_megabytes": 512,
        "mtp": None,
    }
    return RolloutConfig(**{**values, **changes})


def tiny_critic(path: str, **changes) -> CriticConfig:
    """A critic section with every link resolved (token-mean, one epoch, fixed micro-batches)."""
    values = {
        "model": CriticModelConfig(
            path=path,
            tokenizer_path=None,
            external_lib=None,
            trust_remote_code=False,
            enable_gradient_checkpointing=False,
        ),
        "fsdp": fp32_fsdp(),  # verl 0.9's critic.fsdp (verl 0.7: critic.model.fsdp_config)
        "optim": tiny_optim(),
        "checkpoint": checkpoint(),
        "ppo_mini_batch_size": 16,
        "ppo_micro_batch_size_per_gpu": 32,
        "forward_micro_batch_size": None,
        "forward_micro_batch_size_per_gpu": 32,
        "use_dynamic_bsz": False,
        "forward_max_token_len_per_gpu": 32768,
        "ppo_epochs": 1,
        "loss_agg_mode": "token-mean",
        "grad_clip": 1.0,
        "rollout_n": 8,
        "shuffle": False,
    }
    return CriticConfig(**{**values, **changes})


def clipped_critic(path: str, lr: float, steps: int, **changes) -> CriticConfig:
    """tiny_critic as the critic's invariance tests train it: value clipping 0.2, grad clip 0.5, one
    epoch, fixed micro-batches, AdamW at `lr` for `steps` steps."""
    values = dict(
        loss_agg_mode="token-mean",
        cliprange_value=0.2,
        grad_clip=0.5,
        ppo_epochs=1,
        use_dynamic_bsz=False,
        optim=OptimConfig(lr=lr, total_training_steps=steps),
    )
    return tiny_critic(path, **{**values, **changes})


def tiny_reward_model(path: str, **changes) -> RewardModelModelConfig:
    values = {
        "path": path,
        "input_tokenizer": None,
        "external_lib": None,
        "use_fused_kernels": False,
        "fsdp_config": fp32_fsdp(),
    }
    return RewardModelModelConfig(**{**values, **changes})
