"""Per-device memory of a whole run, phase by phase: every role that shares the device, and the rollout.

One device holds, in one process, the actor, its rollout and (when a KL term needs it) the
reference; in processes of their own the critic (GAE) and the reward model, colocated as verl
colocates them. Their state stays on the device between their phases, as their fsdp_config says
(verl's behaviour), unless the device would not hold the step that way: then, on a GPU, the
critic and the reward model keep their params and optimizer state on the host between their phases
(as param+optimizer offload; offload_policy stays itself), the trainer's `idle_on_host`
(`colocated_idle_on_host` decides, for the trainer and for every row the planner prints). Each phase of a step puts one engine at its peak while
the others hold what they keep between phases (engine/memory_model.py gives both per engine). The
rollout holds:

  vLLM on a GPU   its gpu_memory_utilization share of the device (weights + KV cache + workspace,
                  claimed at start and on every wake) while it generates; while it receives weights
                  only its weights (the KV cache still sleeps) plus the sync's gather buffer (up to
                  update_weights_bucket_megabytes of full tensors, plus the tensor that overflows
                  it); between rollouts nothing with free_cache_engine (sleep level 2), else its share
  vLLM on CPU     its weights and rollout.cpu_kv_cache_gb, always (no sleep mode)
  HF generate     a full copy of the weights, always, plus the KV cache of the rank's prompts x n at
                  full length and one step's logits while it generates

With LoRA on the actor (`actor_rollout_ref.model.lora_rank > 0` or a saved adapter) there is no
reference engine: the reference's log-probs are the actor's forward with its adapters off, so the
"ref" phase is the actor's no-grad forward at the ref's micro-batch sizes and nothing is resident for
it. LoRA's trained tensors (the adapters; the critic's value head) set the engines' gradient,
optimizer and reduce terms (memory_model.py).

Each process on a GPU also holds a CUDA context and NCCL buffers (PROCESS_OVERHEAD, an assumption
that scripts/gpu_check.py and the GPU e2e test are there to check) and a host-side baseline. Host
memory per rank: the offloaded state of every engine (pinned tensors rounded up), and while the
engines load, the whole model of the one loading.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.engine.attention import requested_attention, select_attention
from verl_lite.engine.lora_spec import LoraSpec
from verl_lite.engine.memory_model import (
    DTYPE_BYTES,
    EngineEstimate,
    EngineSetup,
    ModelShape,
    adapted_linears,
    estimate,
    read_shape,
)
from verl_lite.roles import uses_critic, uses_reference
from verl_lite.rollout import ROLLOUTS

GB = 1024**3
MB = 1024**2
HEADROOM = 0.9  # a plan fits when its peak is at most this share of the device (trainer/health.py)
PROCESS_OVERHEAD = 768 * MB  # CUDA context + NCCL communicators per GPU process (not measured here)
HOST_PROCESS_OVERHEAD = 2 * GB  # a worker's interpreter, torch, transformers (and vLLM) once imported


def fsdp_mode(fsdp) -> str:
    """The memory model's mode name for an fsdp_config (manual offload counts as the pair)."""
    if fsdp.offload_policy:
        return "offload_policy"
    return "param_optimizer_offload" if fsdp.param_offload or fsdp.optimizer_offload else "none"


@dataclass
class RolloutMemory:
    generate: int  # on the device while generating
    sync: int  # while receiving the actor's weights
    idle: int  # between rollouts (log-probs, updates)


@dataclass
class DevicePlan:
    phases: dict[str, int]  # device bytes per phase, processes' overhead excluded
    overhead: int  # CUDA contexts and NCCL buffers of the processes on the device
    host_per_rank: int  # steady host bytes per rank (offloaded state, pinned rounding included)
    host_load_per_rank: int  # the largest model an engine loads on the host before sharding
    host_overhead_per_rank: int
    engines: dict[str, EngineEstimate] = field(default_factory=dict)
    idle_on_host: bool = False  # the critic / reward model wait on the host between their phases

    @property
    def peak(self) -> int:
        return max(self.phases.values()) + self.overhead

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phases.get)

    @property
    def host_peak_per_rank(self) -> int:
        """The most host bytes a rank holds at once: every engine's offloaded state, or, while one
        engine loads its model before sharding (one at a time: actor, ref, then the critic's and the
        reward model's workers), that load beside the others' state -- not beside its own, which
        exists only once the engine is sharded and the loaded copy is gone (its host copies at
        sharding, its moments at the first step)."""
        steady = self.host_per_rank
        loads = [e.host_load + steady - e.host for e in self.engines.values()]
        return max([steady, *loads]) + self.host_overhead_per_rank


def rollout_memory(
    cfg: PPOTrainerConfig, shape: ModelShape, world: int, device_bytes: int, accelerator: bool
) -> RolloutMemory:
    r = cfg.actor_rollout_ref.rollout
    backend = ROLLOUTS.get(r.name).name  # refuses "auto": plan a normalised config
    w = DTYPE_BYTES[r.dtype]
    p = DTYPE_BYTES[cfg.actor_rollout_ref.actor.fsdp_config.model_dtype]
    largest = max(n for _, n in shape.all_tensors()) * p  # one full tensor from the actor's gather
    if backend == "vllm":
        weights = -(-shape.num_params // r.tensor_model_parallel_size) * w
        buffer = int(r.update_weights_bucket_megabytes * MB) + largest
        if not accelerator:
            held = weights + int(r.cpu_kv_cache_gb * GB)
            return RolloutMemory(generate=held, sync=held + buffer, idle=held)
        share = int(r.gpu_memory_utilization * device_bytes)
        asleep = r.free_cache_engine
        return RolloutMemory(
            generate=share, sync=(weights if asleep else share) + buffer, idle=0 if asleep else share
        )
    weights = shape.num_params * w
    sequences = max(1, cfg.data.train_batch_size * r.n // world)
    seq_len = r.prompt_length + r.response_length
    kv_cache = 2 * shape.layers * shape.kv_dim * sequences * seq_len * w
    return RolloutMemory(
        generate=weights + kv_cache + sequences * shape.vocab * 4, sync=weights + largest, idle=weights
    )


def shard_world(fsdp, world: int) -> int:
    """Ranks one model is sharded over: fsdp_config.fsdp_size when it makes HSDP groups, else all."""
    return fsdp.fsdp_size if 0 < fsdp.fsdp_size < world else world


def engine_setup(fsdp, world: int, seq_len: int, response_len: int, accelerator: bool, **kw) -> EngineSetup:
    """`override_config`: the model section's, whose attn_implementation decides whether attention
    builds an (S, S) mask on this machine (engine/attention.py, the engine's own choice)."""
    mp = fsdp.mixed_precision
    attention = select_attention(
        requested_attention(kw.pop("override_config", None)),
        accelerator=accelerator,
        sp_size=kw.get("sp_size", 1),
        trains=kw.get("trains", True),
    )
    return EngineSetup(
        dense_mask=attention.dense_mask,
        world=shard_world(fsdp, world),
        mode=kw.pop("mode", None) or fsdp_mode(fsdp),
        seq_len=seq_len,
        response_len=response_len,
        model_dtype=fsdp.model_dtype,
        param_dtype=mp.param_dtype,
        reduce_dtype=mp.reduce_dtype,
        reshard_after_forward=fsdp.reshard_after_forward,
        reduce_every_micro=fsdp.reduce_scatter_every_micro_batch,
        pinned_host=accelerator,
        **kw,
    )


def idle_mode(fsdp, idle_on_host: bool) -> str:
    """A critic's or reward model's mode: its fsdp_config's, or with `idle_on_host` (a GPU the device
    would not hold them on: colocated_idle_on_host) params and optimizer state waiting on the host
    between their phases (engine/offload.build_offload); offload_policy keeps its own."""
    mode = fsdp_mode(fsdp)
    return "param_optimizer_offload" if idle_on_host and mode == "none" else mode


def _forward_size(micro: int | None, dynamic: bool, token_budget: int) -> dict:
    return {"forward_tokens": token_budget} if dynamic else {"forward_micro": micro or 1}


LEVERS = ("fused", "activation_offload")  # what the planner may switch on for the actor (plan.py)


def actor_levers(cfg: PPOTrainerConfig, levers: tuple[str, ...] = ()) -> dict:
    """The actor's memory levers as configured, with `levers` (names from LEVERS) switched on."""
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


def reference_engine(cfg: PPOTrainerConfig) -> bool:
    """Whether the run builds a reference engine: a KL term needs the reference, and LoRA is off (with
    LoRA the actor with its adapters off is the reference; workers/actor_rollout_ref.py)."""
    return uses_reference(cfg) and LoraSpec.of(cfg.actor_rollout_ref.model) is None


def _actor_setup(
    cfg: PPOTrainerConfig,
    world: int,
    mode: str,
    micro: int,
    accelerator: bool,
    forward: dict,
    levers: tuple[str, ...] = (),
) -> EngineSetup:
    arr = cfg.actor_rollout_ref
    a, r = arr.actor, arr.rollout
    return engine_setup(
        a.fsdp_config,
        world,
        r.prompt_length + r.response_length,
        r.response_length,
        accelerator,
        mode=mode,
        micro=micro,
        grad_checkpointing=arr.model.enable_gradient_checkpointing,
        tokens_per_micro=a.ppo_max_token_len_per_gpu if a.use_dynamic_bsz else None,
        override_config=arr.model.override_config,
        **actor_levers(cfg, levers),
        **forward,
        **lora_fields(arr.model, "causal_lm"),
    )


def _ref_forward(cfg: PPOTrainerConfig) -> dict:
    ref = cfg.actor_rollout_ref.ref
    return _forward_size(
        ref.log_prob_micro_batch_size_per_gpu,
        ref.log_prob_use_dynamic_bsz,
        ref.log_prob_max_token_len_per_gpu,
    )


def role_engines(
    cfg: PPOTrainerConfig,
    shape: ModelShape,
    world: int,
    mode: str,
    micro: int,
    accelerator: bool,
    levers: tuple[str, ...] = (),
    idle_on_host: bool = False,
) -> dict[str, EngineEstimate]:
    """The estimate of every engine the run builds, the actor at (mode, micro) with `levers` on; with
    `idle_on_host` the critic's and reward model's state on the host between their phases."""
    arr = cfg.actor_rollout_ref
    r = arr.rollout
    seq, resp = r.prompt_length + r.response_length, r.response_length
    forward = _forward_size(
        r.log_prob_micro_batch_size_per_gpu, r.log_prob_use_dynamic_bsz, r.log_prob_max_token_len_per_gpu
    )
    out = {"actor": estimate(shape, _actor_setup(cfg, world, mode, micro, accelerator, forward, levers))}
    if reference_engine(cfg):
        ref = dict(
            sp_size=arr.ref.ulysses_sequence_parallel_size,
            fused=arr.model.use_fused_kernels or "fused" in levers,  # the model's key: actor and ref
            entropy_chunking=arr.ref.entropy_from_logits_with_chunking,
        )
        out["ref"] = estimate(
            shape,
            engine_setup(
                arr.ref.fsdp_config,
                world,
                seq,
                resp,
                accelerator,
                micro=0,
                trains=False,
                override_config=arr.model.override_config,
                **_ref_forward(cfg),
                **ref,
            ),
        )
    if uses_critic(cfg):
        c = cfg.critic
        f = _forward_size(
            c.forward_micro_batch_size_per_gpu, c.use_dynamic_bsz, c.forward_max_token_len_per_gpu
        )
        critic = engine_setup(
            c.model.fsdp_config,
            world,
            seq,
            resp,
            accelerator,
            mode=idle_mode(c.model.fsdp_config, idle_on_host),
            micro=c.ppo_micro_batch_size_per_gpu or 1,
            grad_checkpointing=c.model.enable_gradient_checkpointing,
            tokens_per_micro=c.ppo_max_token_len_per_gpu if c.use_dynamic_bsz else None,
            sp_size=c.ulysses_sequence_parallel_size,
            activation_offload=c.model.enable_activation_offload,
            override_config=c.model.override_config,
            **f,
            **lora_fields(c.model, "value"),
        )
        out["critic"] = estimate(read_shape(c.model.path, head="value", key="critic.model.path"), critic)
    if cfg.reward_model.enable:
        rm = cfg.reward_model
        f = _forward_size(rm.micro_batch_size_per_gpu, rm.use_dynamic_bsz, rm.forward_max_token_len_per_gpu)
        out["reward_model"] = estimate(
            read_shape(rm.model.path, head="value", key="reward_model.model.path"),
            engine_setup(
                rm.model.fsdp_config,
                world,
                seq,
                resp,
                accelerator,
                mode=idle_mode(rm.model.fsdp_config, idle_on_host),
                micro=0,
                trains=False,
                override_config=rm.model.override_config,
                **f,
            ),
        )
    return out


PHASE_OF = {"actor": "old_log_prob", "ref": "ref", "critic": "values", "reward_model": "reward"}
PROCESS_OF = {"actor": "actor", "ref": "actor", "critic": "critic", "reward_model": "reward_model"}


def plan_device(
    cfg: PPOTrainerConfig,
    shape: ModelShape,
    world: int,
    mode: str,
    micro: int,
    device_bytes: int,
    accelerator: bool = True,
    levers: tuple[str, ...] = (),
    idle_on_host: bool | None = None,
) -> DevicePlan:
    """Device bytes per phase with the actor at (mode, micro) and `levers` (plan_memory.LEVERS) on a
    device of `device_bytes`; `idle_on_host`: whether the critic and reward model wait on the host
    between their phases (None: as the trainer decides, colocated_idle_on_host)."""
    if idle_on_host is None:
        args = (cfg, shape, world, mode, micro, device_bytes, accelerator, levers)
        idle_on_host = colocated_idle_on_host(*args)
    engines = role_engines(cfg, shape, world, mode, micro, accelerator, levers, idle_on_host)
    roll = rollout_memory(cfg, shape, world, device_bytes, accelerator)
    resident = {role: e.resident for role, e in engines.items()}

    def beside(role: str) -> int:
        return sum(v for k, v in resident.items() if k != role)

    actor = engines["actor"]
    phases = {
        "generate": sum(resident.values()) + roll.generate,
        "update_weights": beside("actor") + max(actor.resident, actor.terms["params"]) + roll.sync,
    }
    for role, e in engines.items():
        phases[PHASE_OF[role]] = beside(role) + e.forward + roll.idle
    if uses_reference(cfg) and "ref" not in engines:  # LoRA: the actor's forward with adapters off
        as_ref = estimate(
            shape, _actor_setup(cfg, world, mode, micro, accelerator, _ref_forward(cfg), levers)
        )
        phases["ref"] = beside("actor") + as_ref.forward + roll.idle
    for role in ("critic", "actor"):
        if role in engines:
            phases[f"update_{role}"] = beside(role) + engines[role].update + roll.idle
    processes = {PROCESS_OF[role] for role in engines}
    per_process = PROCESS_OVERHEAD if accelerator else 0
    return DevicePlan(
        phases=phases,
        overhead=per_process * len(processes),
        host_per_rank=sum(e.host for e in engines.values()),
        host_load_per_rank=max(e.host_load for e in engines.values()),
        host_overhead_per_rank=HOST_PROCESS_OVERHEAD * len(processes),
        engines=engines,
        idle_on_host=idle_on_host,
    )


def colocated_idle_on_host(
    cfg: PPOTrainerConfig,
    shape: ModelShape,
    world: int,
    mode: str,
    micro: int,
    device_bytes: int,
    accelerator: bool = True,
    levers: tuple[str, ...] = (),
) -> bool:
    """Whether a critic / reward model sharing each GPU with the actor waits on the host between its
    phases: only when the device would not hold the step with their state resident (its peak above
    HEADROOM of the device). Moving it costs its params and optimizer state host<->device every step,
    so it stays when it fits, as in verl, where only a role's own fsdp_config offloads it."""
    if not accelerator or not (uses_critic(cfg) or cfg.reward_model.enable):
        return False
    resident = plan_device(cfg, shape, world, mode, micro, device_bytes, accelerator, levers, False)
    return resident.peak > HEADROOM * device_bytes
