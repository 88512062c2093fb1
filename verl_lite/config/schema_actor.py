"""Schema sections of the policy and its reference: actor (PPO update), policy loss, ref.

Defaults are verl's (config/schema.py says how); each field's comment (at the end of its line,
or above a field too long for one) is its documentation in docs/config.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl_lite.config.fields import (
    FINITE,
    MICRO,
    NON_NEG,
    POS,
    POS_INT,
    UNIT_OPEN,
    choice,
    follows,
    key,
    no_effect,
    only,
    refused,
)
from verl_lite.config.freeze import ConfigNode
from verl_lite.config.gates import DYNAMIC, FIXED, KL_LOSS, LOG_PROB_DYNAMIC, LOG_PROB_FIXED
from verl_lite.config.schema_engine import (
    FSDP1,
    STRATEGIES,
    CheckpointConfig,
    FSDPConfig,
    OptimConfig,
    RouterReplayConfig,
)

ARR = "actor_rollout_ref"
LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")  # algos/kl.py


def is_kl_type(name) -> bool:
    """A known KL estimator, optionally with one trailing '+' (k2's gradient: algos/kl.py)."""
    return isinstance(name, str) and (name[:-1] if name.endswith("+") else name) in KL_TYPES


# verl 0.9.1's default trainer (use_v1) shuffles each batch before its mini-batches (seeded by
# data_loader_seed); verl_lite takes them in order, so shuffle=True would train other mini-batches
SHUFFLE = "mini-batches are taken in order (verl 0.9's V1 worker shuffles them, seeded by data_loader_seed): leave it False"


@dataclass
class PolicyLossConfig(ConfigNode):
    loss_mode: str = "vanilla"  # policy loss (docs/algorithms.md): vanilla, gspo, geo_mean, cispo, sapo, gpg, clip_cov, kl_cov, dppo_tv, dppo_kl, dro
    clip_cov_ratio: float = 0.0002  # clip_cov: share of tokens whose covariance is clipped
    clip_cov_lb: float = key(1.0, FINITE)  # clip_cov: lower covariance bound
    clip_cov_ub: float = key(5.0, FINITE)  # clip_cov: upper covariance bound
    kl_cov_ratio: float = 0.0002  # kl_cov: share of tokens that get the KL penalty
    ppo_kl_coef: float = key(0.1, NON_NEG)  # kl_cov: weight of that KL penalty
    dro_beta: float | None = None  # dro: weight of the squared log-ratio penalty (> 0; required by dro)


@dataclass
class ActorConfig(ConfigNode):
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    # responses per prompt (verl's copy of rollout.n)
    rollout_n: int = key(f"${{{ARR}.rollout.n}}", rule=follows("it is actor_rollout_ref.rollout.n; set that"))
    # fsdp | fsdp2: both run FSDP2 (fully_shard)
    strategy: str = key(
        "fsdp",
        rule=only(STRATEGIES, FSDP1),
        deviates="verl's name is kept, but fsdp and fsdp2 both run FSDP2 (fully_shard): verl_lite has no "
        "FSDP1 (the same for critic.strategy, reward_model.strategy and ref.strategy)",
    )
    ppo_mini_batch_size: int = key(256, POS_INT)  # prompts per optimizer step (global; x rollout.n responses)
    # deprecated global micro size; use the per-GPU key
    ppo_micro_batch_size: int | None = key(None, MICRO, gate=FIXED)
    # responses per forward/backward on one worker
    ppo_micro_batch_size_per_gpu: int | None = key(None, MICRO, gate=FIXED)
    use_dynamic_bsz: bool = False  # token-budgeted micro-batches (ppo_max_token_len_per_gpu)
    # token budget per micro-batch with use_dynamic_bsz
    ppo_max_token_len_per_gpu: int = key(16384, POS_INT, gate=DYNAMIC)
    clip_ratio: float = key(0.2, UNIT_OPEN)  # PPO clip range where clip_ratio_low/high are null
    clip_ratio_low: float | None = key(0.2, POS.or_null("clip_ratio"))  # lower clip range; null: clip_ratio
    clip_ratio_high: float | None = key(0.2, POS.or_null("clip_ratio"))  # upper clip range; null: clip_ratio
    tau_pos: float = 1.0  # sapo: temperature of the gate for positive advantages
    tau_neg: float = 1.05  # sapo: temperature of the gate for negative advantages
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    clip_ratio_c: float = 3.0  # dual-clip cap (> 1) on the ratio for negative advantages
    # token-mean | token-sum | seq-mean-token-sum | seq-mean-token-mean | seq-mean-token-sum-norm
    loss_agg_mode: str = key("token-mean", choice(LOSS_AGG_MODES))
    # seq-mean-token-sum-norm's divisor; null: the response length
    loss_scale_factor: int | None = key(None, POS_INT.or_null("the response length of each batch"))
    entropy_coeff: float = key(0.0, NON_NEG)  # entropy bonus weight
    use_kl_loss: bool = False  # add KL(actor || ref) to the loss (GRPO style)
    kl_loss_coef: float = key(0.001, NON_NEG, gate=KL_LOSS)  # weight of the KL loss
    # kl | abs | mse | low_var_kl (k1 | k2 | k3); '+': k2's gradient
    kl_loss_type: str = key("low_var_kl", choice(KL_TYPES, "(optionally with '+')", is_kl_type), gate=KL_LOSS)
    ppo_epochs: int = key(1, POS_INT)  # passes over each training batch
    # verl's new worker: shuffle responses before splitting into mini-batches
    shuffle: bool = key(False, rule=refused(SHUFFLE))
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    # the model's use_fused_kernels
    use_fused_kernels: bool = key(
        f"${{{ARR}.model.use_fused_kernels}}", rule=follows("set actor_rollout_ref.model.use_fused_kernels")
    )
    router_replay: RouterReplayConfig = key(factory=RouterReplayConfig, rule=no_effect())
    # max global grad norm (verl's legacy-worker name); default: optim.clip_grad
    grad_clip: float = key(
        "${.optim.clip_grad}",
        POS,
        deviates="verl has two literals read by different worker implementations (actor.grad_clip by its "
        "default legacy worker, optim.clip_grad by its new engine); here grad_clip follows optim.clip_grad, "
        "so either spelling sets the clip (grad_clip wins when both are set)",
    )
    # verl 0.9's FSDP engine reads these from its own section; the role's spelling is [DEPRECATED]
    # there for the size, and linked for the entropy keys (both current)

    # ranks one sequence is split over (Ulysses sequence parallelism)
    ulysses_sequence_parallel_size: int = key(
        1, POS_INT, verl09=f"{ARR}.actor.fsdp_config.ulysses_sequence_parallel_size"
    )
    # compute the entropy over vocabulary chunks (memory)
    entropy_from_logits_with_chunking: bool = key(
        False, older=(f"{ARR}.actor.fsdp_config.entropy_from_logits_with_chunking",), quiet=True
    )
    # recompute the entropy in backward instead of keeping it (memory)
    entropy_checkpointing: bool = key(
        False, older=(f"{ARR}.actor.fsdp_config.entropy_checkpointing",), quiet=True
    )
    # the model's use_remove_padding
    use_remove_padding: bool = key(
        f"${{{ARR}.model.use_remove_padding}}", rule=follows("set actor_rollout_ref.model.use_remove_padding")
    )
    calculate_sum_pi_squared: bool = False  # compute sum of squared token probabilities (optimal baselines)
    # recompute it in backward (memory)
    sum_pi_squared_checkpointing: bool = key(
        False,
        rule=no_effect(
            "sum_pi_squared is computed only in compute_log_prob, without gradient: nothing to recompute"
        ),
    )


@dataclass
class RefConfig(ConfigNode):
    # responses per prompt (verl's copy of rollout.n)
    rollout_n: int = key(f"${{{ARR}.rollout.n}}", rule=follows("it is actor_rollout_ref.rollout.n; set that"))
    # fsdp | fsdp2: both run FSDP2 (fully_shard)
    strategy: str = key(f"${{{ARR}.actor.strategy}}", rule=only(STRATEGIES, FSDP1))
    # deprecated global size; use the per-GPU key
    log_prob_micro_batch_size: int | None = key(None, MICRO, gate=LOG_PROB_FIXED)
    # responses per ref forward on one worker
    log_prob_micro_batch_size_per_gpu: int | None = key(None, MICRO, gate=LOG_PROB_FIXED)
    log_prob_use_dynamic_bsz: bool = f"${{{ARR}.actor.use_dynamic_bsz}}"  # token-budgeted ref forwards
    # token budget per ref forward
    log_prob_max_token_len_per_gpu: int = key(
        f"${{{ARR}.actor.ppo_max_token_len_per_gpu}}", POS_INT, gate=LOG_PROB_DYNAMIC
    )
    router_replay: RouterReplayConfig = key(factory=RouterReplayConfig, rule=no_effect())
    # the reference's FSDP2 and offload modes
    fsdp_config: FSDPConfig = field(default_factory=lambda: FSDPConfig(forward_only=True))
    # as the actor's
    ulysses_sequence_parallel_size: int = key(
        f"${{{ARR}.actor.ulysses_sequence_parallel_size}}",
        POS_INT,
        verl09=f"{ARR}.ref.fsdp_config.ulysses_sequence_parallel_size",
    )
    # compute the entropy over vocabulary chunks (memory)
    entropy_from_logits_with_chunking: bool = key(
        False, older=(f"{ARR}.ref.fsdp_config.entropy_from_logits_with_chunking",), quiet=True
    )
    # recompute the entropy in backward instead of keeping it (memory)
    entropy_checkpointing: bool = key(
        False, older=(f"{ARR}.ref.fsdp_config.entropy_checkpointing",), quiet=True
    )
