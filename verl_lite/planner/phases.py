"""Per-device memory of a whole run, phase by phase: every role that shares the device, and the rollout.

One device holds, in one process, the actor, its rollout and (when a KL term needs it) the
reference; in processes of their own the critic (GAE) and the reward model, colocated as verl
colocates them. Their state stays on the device between their phases, as their fsdp_config says
(verl's behaviour), unless the device would not hold the step that way: then, on a GPU, the
critic and the reward model keep their params and optimizer state on the host between their phases
(as param+optimizer offload; offload_policy stays itself): `idle_on_host`, which
`colocated_idle_on_host` decides for every row the planner prints and start-up writes into the
config (auto_offload.resolve_idle_on_host). Each
phase of a step puts one engine at its peak while the others hold what they keep between phases
(role_engines.py gives both per engine); the rollout holds what its backend's memory model says
(rollout/memory.py, declared with the backend in the rollout registry). With LoRA on the actor the
"ref" phase is the actor's no-grad forward at the ref's micro-batch sizes, nothing resident for it.

Each process on a GPU also holds a CUDA context and NCCL buffers (PROCESS_OVERHEAD, an assumption
that scripts/gpu_check.py and the GPU e2e test are there to check) and a host-side baseline. Host
memory per rank: the offloaded state of every engine (pinned tensors rounded up), and while the
engines load, the whole model of the one loading.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl_lite.config.common import trainer_mode
from verl_lite.engine.model_shape import DTYPE_BYTES
from verl_lite.planner.engine_memory import EngineEstimate
from verl_lite.planner.request import GB, HEADROOM, MB, Choice, Request
from verl_lite.planner.role_engines import actor_estimate, log_prob_forward, role_engines
from verl_lite.roles import uses_critic, uses_reference
from verl_lite.rollout import ROLLOUTS
from verl_lite.rollout.memory import outbox_memory

PROCESS_OVERHEAD = 768 * MB  # CUDA context + NCCL communicators per GPU process (not measured here)
HOST_PROCESS_OVERHEAD = 2 * GB  # a worker's interpreter, torch, transformers (and vLLM) once imported
PHASE_OF = {"actor": "old_log_prob", "ref": "ref", "critic": "values", "reward_model": "reward"}
PROCESS_OF = {"actor": "actor", "ref": "actor", "critic": "critic", "reward_model": "reward_model"}


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


def plan_device(req: Request, actor: Choice, idle_on_host: bool | None = None) -> DevicePlan:
    """Device bytes per phase with the actor at `actor` on a device of `req.device_bytes`;
    `idle_on_host`: whether the critic and reward model wait on the host between their phases (None:
    as the trainer decides, colocated_idle_on_host)."""
    if idle_on_host is None:
        idle_on_host = colocated_idle_on_host(req, actor)
    engines = role_engines(req, actor, idle_on_host)
    roll = ROLLOUTS.get(req.cfg.actor_rollout_ref.rollout.name).memory(req)  # refuses "auto": normalise first
    if trainer_mode(req.cfg) == "separate_async":  # the rollout is the rollout group's (plan_rollout_group)
        roll = outbox_memory(req)
    resident = {role: e.resident for role, e in engines.items()}

    def beside(role: str) -> int:
        return sum(v for k, v in resident.items() if k != role)

    a = engines["actor"]
    phases = {
        "generate": sum(resident.values()) + roll.generate,
        "update_weights": beside("actor") + max(a.resident, a.terms["params"]) + roll.sync,
    }
    for role, e in engines.items():
        phases[PHASE_OF[role]] = beside(role) + e.forward + roll.idle
    if uses_reference(req.cfg) and "ref" not in engines:  # LoRA: the actor's forward with adapters off
        as_ref = actor_estimate(req, actor, log_prob_forward(req.cfg.actor_rollout_ref.ref))
        phases["ref"] = beside("actor") + as_ref.forward + roll.idle
    for role in ("critic", "actor"):
        if role in engines:
            phases[f"update_{role}"] = beside(role) + engines[role].update + roll.idle
    processes = {PROCESS_OF[role] for role in engines}
    per_process = PROCESS_OVERHEAD if req.accelerator else 0
    return DevicePlan(
        phases=phases,
        overhead=per_process * len(processes),
        host_per_rank=sum(e.host for e in engines.values()),
        host_load_per_rank=max(e.host_load for e in engines.values()),
        host_overhead_per_rank=HOST_PROCESS_OVERHEAD * len(processes),
        engines=engines,
        idle_on_host=idle_on_host,
    )


def colocated_idle_on_host(req: Request, actor: Choice) -> bool:
    """Whether a critic / reward model sharing each GPU with the actor waits on the host between its
    phases: only when the device would not hold the step with their state resident (its peak above
    HEADROOM of the device). Moving it costs its params and optimizer state host<->device every step,
    so it stays when it fits, as in verl, where only a role's own fsdp_config offloads it."""
    if not req.accelerator or not (uses_critic(req.cfg) or req.cfg.reward_model.enable):
        return False
    return plan_device(req, actor, False).peak > HEADROOM * req.device_bytes


@dataclass
class RolloutGroupPlan:
    """verl 0.9's separate_async rollout group (workers/rollout_worker.py): its devices, and what each
    holds -- only a rollout engine, never asleep -- while it generates and while it loads weights;
    host bytes per rank for the weights in transit (a full copy in the rollout's dtype, or the adapter)."""

    devices: int
    generate: int
    sync: int
    host_per_rank: int

    @property
    def peak(self) -> int:
        return max(self.generate, self.sync)


def plan_rollout_group(req: Request) -> RolloutGroupPlan | None:
    """The rollout group's plan under separate_async (None in the other modes): the backend's memory
    model on the group's own devices (its in-flight batches included), plus a process's overhead."""
    if trainer_mode(req.cfg) != "separate_async":
        return None
    r = req.cfg.actor_rollout_ref.rollout
    devices = r.nnodes * r.n_gpus_per_node
    backend = ROLLOUTS.get(r.name)
    group = backend.memory(Request(req.cfg, req.shape, devices, req.device_gb, req.host_gb, req.accelerator))
    overhead = PROCESS_OVERHEAD if req.accelerator else 0
    in_transit = req.shape.num_params * DTYPE_BYTES[r.dtype]
    return RolloutGroupPlan(devices, group.generate + overhead, group.sync + overhead, in_transit)
