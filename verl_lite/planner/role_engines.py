"""The engine each role builds, described for the memory model (an `EngineSetup` per role, read from
its config section) and estimated (engine_memory.estimate): the actor at the planner's `Choice`, the
reference when a KL term needs it, the critic (GAE) and the reward model.

With LoRA on the actor (`actor_rollout_ref.model.lora_rank > 0` or a saved adapter) there is no
reference engine: the reference's log-probs are the actor's forward with its adapters off (phases.py
plans that forward). LoRA's trained tensors (the adapters; the critic's value head) set the engines'
gradient, optimizer and reduce terms (engine_memory.py). The critic and the reward model keep their
fsdp_config's mode, or with `idle_on_host` wait on the host between their phases (phases.py decides;
start-up then sets their param_offload and optimizer_offload).
"""

from __future__ import annotations

from verl_lite.engine.attention import requested_attention, select_attention
from verl_lite.engine.lora_spec import LoraSpec
from verl_lite.engine.model_shape import adapted_linears, read_shape
from verl_lite.planner.engine_memory import EngineEstimate, estimate
from verl_lite.planner.engine_setup import EngineSetup
from verl_lite.planner.request import Choice, Request
from verl_lite.roles import uses_critic, uses_reference


def fsdp_mode(fsdp) -> str:
    """The memory model's mode name for an fsdp_config (manual offload counts as the pair)."""
    if fsdp.offload_policy:
        return "offload_policy"
    return "param_optimizer_offload" if fsdp.param_offload or fsdp.optimizer_offload else "none"


def shard_world(fsdp, world: int) -> int:
    """Ranks one model is sharded over: fsdp_config.fsdp_size when it makes HSDP groups, else all."""
    return fsdp.fsdp_size if 0 < fsdp.fsdp_size < world else world


def setup_for(fsdp, req: Request, trains: bool = True, **kw) -> EngineSetup:
    """An engine of `fsdp` (its fsdp_config) in the run `req`. `override_config`: the model section's,
    whose attn_implementation decides whether attention builds an (S, S) mask on this machine
    (engine/attention.py, the engine's own choice)."""
    mp, r = fsdp.mixed_precision, req.cfg.actor_rollout_ref.rollout
    attention = select_attention(
        requested_attention(kw.pop("override_config", None)),
        accelerator=req.accelerator,
        sp_size=kw.get("sp_size", 1),
        trains=trains,
    )
    return EngineSetup(
        dense_mask=attention.dense_mask,
        world=shard_world(fsdp, req.world),
        mode=kw.pop("mode", None) or fsdp_mode(fsdp),
        seq_len=r.prompt_length + r.response_length,
        response_len=r.response_length,
        model_dtype=fsdp.model_dtype,
        param_dtype=mp.param_dtype,
        reduce_dtype=mp.reduce_dtype,
        reshard_after_forward=fsdp.reshard_after_forward,
        reduce_every_micro=fsdp.reduce_scatter_every_micro_batch,
        pinned_host=req.accelerator,
        trains=trains,
        **kw,
    )


def idle_mode(fsdp, idle_on_host: bool) -> str:
    """A critic's or reward model's mode: its fsdp_config's, or with `idle_on_host` (a GPU the device
    would not hold them on: phases.colocated_idle_on_host) params and optimizer state waiting on the
    host between their phases (the offload start-up then sets: auto_offload.resolve_idle_on_host);
    offload_policy keeps its own."""
    mode = fsdp_mode(fsdp)
    return "param_optimizer_offload" if idle_on_host and mode == "none" else mode


def forward_size(micro: int | None, dynamic: bool, token_budget: int) -> dict:
    return {"forward_tokens": token_budget} if dynamic else {"forward_micro": micro or 1}


def actor_levers(cfg, levers: tuple[str, ...] = ()) -> dict:
    """The actor's memory levers as configured, with `levers` (names from request.LEVERS) switched on."""
    arr = cfg.actor_rollout_ref
    return dict(
        sp_size=arr.actor.ulysses_sequence_parallel_size,
        fused=arr.model.use_fused_kernels or "fused" in levers,
        entropy_chunking=arr.actor.entropy_from_logits_with_chunking,
        entropy_checkpointing=arr.actor.entropy_checkpointing,
        activation_offload=arr.model.enable_activation_offload or "activation_offload" in levers,
    )


def lora_fields(model_cfg, kind: str) -> dict:
    """EngineSetup's LoRA fields for a model section ({} without LoRA): its rank and adapted linears,
    or the saved adapter's with lora_adapter_path."""
    spec = LoraSpec.of(model_cfg, kind)
    if spec is None:
        return {}
    return {"lora_rank": spec.max_rank, "lora_targets": adapted_linears(*spec.modules)}


def reference_engine(cfg) -> bool:
    """Whether the run builds a reference engine: a KL term needs the reference, and LoRA is off (with
    LoRA the actor with its adapters off is the reference; workers/actor_rollout_ref.py)."""
    return uses_reference(cfg) and LoraSpec.of(cfg.actor_rollout_ref.model) is None


def log_prob_forward(section) -> dict:
    """The no-grad forward's size of a section with log_prob_* keys (the rollout's, the ref's)."""
    return forward_size(
        section.log_prob_micro_batch_size_per_gpu,
        section.log_prob_use_dynamic_bsz,
        section.log_prob_max_token_len_per_gpu,
    )


def actor_estimate(req: Request, actor: Choice, forward: dict) -> EngineEstimate:
    """The actor at `actor`, its no-grad forward sized by `forward` (the rollout's or the ref's)."""
    arr = req.cfg.actor_rollout_ref
    a = arr.actor
    setup = setup_for(
        a.fsdp_config,
        req,
        mode=actor.mode,
        micro=actor.micro,
        grad_checkpointing=arr.model.enable_gradient_checkpointing,
        tokens_per_micro=a.ppo_max_token_len_per_gpu if a.use_dynamic_bsz else None,
        override_config=arr.model.override_config,
        **actor_levers(req.cfg, actor.levers),
        **forward,
        **lora_fields(arr.model, "causal_lm"),
    )
    return estimate(req.shape, setup)


def role_engines(req: Request, actor: Choice, idle_on_host: bool = False) -> dict[str, EngineEstimate]:
    """The estimate of every engine the run builds, the actor at `actor`; with `idle_on_host` the
    critic's and reward model's state on the host between their phases."""
    cfg = req.cfg
    arr = cfg.actor_rollout_ref
    out = {"actor": actor_estimate(req, actor, log_prob_forward(arr.rollout))}
    if reference_engine(cfg):
        ref = setup_for(
            arr.ref.fsdp_config,
            req,
            trains=False,
            micro=0,
            override_config=arr.model.override_config,
            sp_size=arr.ref.ulysses_sequence_parallel_size,
            fused=arr.model.use_fused_kernels or "fused" in actor.levers,  # the model's key: actor and ref
            entropy_chunking=arr.ref.entropy_from_logits_with_chunking,
            **log_prob_forward(arr.ref),
        )
        out["ref"] = estimate(req.shape, ref)
    if uses_critic(cfg):
        c = cfg.critic
        critic = setup_for(
            c.fsdp,
            req,
            mode=idle_mode(c.fsdp, idle_on_host),
            micro=c.ppo_micro_batch_size_per_gpu or 1,
            grad_checkpointing=c.model.enable_gradient_checkpointing,
            tokens_per_micro=c.ppo_max_token_len_per_gpu if c.use_dynamic_bsz else None,
            sp_size=c.ulysses_sequence_parallel_size,
            activation_offload=c.model.enable_activation_offload,
            override_config=c.model.override_config,
            **forward_size(
                c.forward_micro_batch_size_per_gpu, c.use_dynamic_bsz, c.forward_max_token_len_per_gpu
            ),
            **lora_fields(c.model, "value"),
        )
        out["critic"] = estimate(read_shape(c.model.path, head="value", key="critic.model.path"), critic)
    if cfg.reward_model.enable:
        rm = cfg.reward_model
        setup = setup_for(
            rm.model.fsdp_config,
            req,
            trains=False,
            mode=idle_mode(rm.model.fsdp_config, idle_on_host),
            micro=0,
            override_config=rm.model.override_config,
            **forward_size(rm.micro_batch_size_per_gpu, rm.use_dynamic_bsz, rm.forward_max_token_len_per_gpu),
        )
        out["reward_model"] = estimate(
            read_shape(rm.model.path, head="value", key="reward_model.model.path"), setup
        )
    return out
