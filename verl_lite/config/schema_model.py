"""Schema sections of the models: the actor's HF model (shared by the ref and the rollout), and the
critic's and reward model's.

Defaults are verl's (config/schema.py says how); each field's comment (at the end of its line,
or above a field too long for one) is its documentation in docs/config.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl_lite.config.fields import LORA_RANK, POS, TEXT, key, no_effect, only
from verl_lite.config.freeze import ConfigNode
from verl_lite.config.gates import LORA, RM_LEGACY
from verl_lite.config.schema_engine import FSDPConfig

# verl's placeholder paths: defaults a real run must replace (start-up names them when missing)
VERL_MODEL = "~/models/deepseek-llm-7b-chat"
VERL_REWARD_MODEL = "~/models/FsfairX-LLaMA3-RM-v0.1"


@dataclass
class ModelBase(ConfigNode):
    """The keys every model section has (what the engine reads to load and run a model)."""

    path: str | None = VERL_MODEL  # local HF model folder (config, weights, tokenizer)
    external_lib: str | None = None  # module imported before loading (registers custom models)
    # HF config fields to override, and attn_implementation (verl's default flash_attention_2; engine/attention.py)
    override_config: dict[str, Any] | None = field(default_factory=dict)
    trust_remote_code: bool | None = False  # passed to the model loader
    use_shm: bool | None = False  # copy the model folder to /dev/shm once per node and load it from there
    enable_gradient_checkpointing: bool = True  # recompute activations in backward
    use_remove_padding: bool = True  # pack sequences without padding into one row for forward passes


@dataclass
class LoraBlockConfig(ConfigNode):
    """actor_rollout_ref.model.lora: verl 0.9's LoRA block. Its other keys are Megatron's LoRA (verl's
    FSDP engine reads lora_rank, lora_alpha, ... above): accepted at verl's defaults, refused when set."""

    # LoRA: send the rollout W + alpha/r * B A at each weight sync, served without vLLM's LoRA
    merge: bool = False


@dataclass
class ModelConfig(ModelBase):
    """actor_rollout_ref.model: the policy's model, also the reference's and the rollout's."""

    tokenizer_path: str | None = None  # tokenizer folder; null: path
    custom_chat_template: str | None = None  # Jinja chat template replacing the tokenizer's
    enable_activation_offload: bool = False  # keep activations on the host between forward and backward
    # > 0: LoRA of this rank on the frozen model, no reference copy; 0: full tuning
    lora_rank: int = key(0, LORA_RANK)
    # LoRA scaling: an adapter's update is multiplied by lora_alpha / lora_rank
    lora_alpha: int = key(16, POS, gate=LORA)
    # modules LoRA adapts: all-linear (but the LM head) or a list
    target_modules: Any = key("all-linear", gate=LORA)
    exclude_modules: Any = key(None, gate=LORA)  # modules LoRA leaves alone: a list of names or a regex
    lora_adapter_path: str | None = None  # saved PEFT adapter to continue from (rank, targets)
    lora: LoraBlockConfig = field(default_factory=LoraBlockConfig)
    use_fused_kernels: bool = False  # log-probs and entropy from hidden states in chunks, without full logits


@dataclass
class CriticModelConfig(ModelBase):
    """critic.model: the value model (its LM backbone + a new scalar head)."""

    path: str | None = VERL_MODEL  # value model folder (its LM backbone + a new scalar head)
    # tokenizer folder (must give the actor's ids); null: path
    tokenizer_path: str | None = key(None, TEXT.or_null("path"))
    external_lib: str | None = "${actor_rollout_ref.model.external_lib}"  # module imported before loading
    # passed to the model loader
    trust_remote_code: bool | None = "${actor_rollout_ref.model.trust_remote_code}"
    enable_activation_offload: bool = False  # keep activations on the host between forward and backward
    use_remove_padding: bool = True  # pack sequences without padding into one row for forward passes
    # > 0: LoRA of this rank on the frozen backbone (value head trained in full)
    lora_rank: int = key(0, LORA_RANK)
    # LoRA scaling: an adapter's update is multiplied by lora_alpha / lora_rank
    lora_alpha: int = key(16, POS, gate=LORA)
    # modules LoRA adapts: all-linear (but the value head) or a list
    target_modules: Any = key("all-linear", gate=LORA)
    exclude_modules: Any = key(None, gate=LORA)  # modules LoRA leaves alone: a list of names or a regex


@dataclass
class RewardModelModelConfig(ModelBase):
    """reward_model.model: a scalar reward model (AutoModelForSequenceClassification, num_labels=1)."""

    # verl re-tokenises with it; here must be null: the reward model reads the actor's ids
    input_tokenizer: str | None = key(
        "${actor_rollout_ref.model.path}",
        gate=RM_LEGACY,
        rule=only(
            (None,),
            "the reward model reads the actor's token ids as they are (no chat-template switch); use one that shares the actor's tokenizer and set reward_model.model.input_tokenizer=null",
        ),
        deviates="verl decodes with it and re-applies the reward model's chat template; verl_lite's reward "
        "model reads the actor's token ids as they are, so with reward_model.enable=True it must be null (a "
        "reward model sharing the actor's tokenizer)",
    )
    # passed to the model loader
    trust_remote_code: bool | None = key(
        False,
        deviates="verl 0.9.1 keeps it as a null legacy key and its reward loop loads the reward model's "
        "tokenizer with trust_remote_code=True; here it is verl 0.7's False, so no code from a model folder "
        "runs unless the command asks for it",
    )
    path: str | None = key(None, verl09="reward.reward_model.model_path")  # reward model folder
    external_lib: str | None = "${actor_rollout_ref.model.external_lib}"  # module imported before loading
    use_remove_padding: bool | None = False  # pack sequences without padding into one row for forward passes
    # fused kernels for its forward
    use_fused_kernels: bool | None = key(
        "${actor_rollout_ref.model.use_fused_kernels}",
        rule=no_effect("the reward model's score head computes no token log-probs: nothing to fuse"),
    )
    enable_gradient_checkpointing: bool = False  # forward only: nothing to recompute
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)  # FSDP2 and offload modes of the reward model
