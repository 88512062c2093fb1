"""The planner at start-up and in the trainer, for the memory the workers' devices report.

With `trainer.auto_offload=True` start-up's `resolve_auto_offload` sets what the recommendation
(recommend.py) gives, before the checks run on it and the config is frozen; then
`resolve_idle_on_host` decides whether a critic / reward model sharing each GPU with the actor waits
on the host between their phases (phases.colocated_idle_on_host, for the actor as configured, after
auto_offload) and, where it does, writes it into the config as that role's param_offload and
optimizer_offload: the frozen config the workers are built from says what they do.
"""

from __future__ import annotations

import logging

from verl_lite.config.common import FSDP_SECTIONS, world_size
from verl_lite.config.keys import lookup
from verl_lite.config.overrides import apply_to_config
from verl_lite.config.run import Run
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.engine.model_shape import read_shape
from verl_lite.planner.phases import colocated_idle_on_host, plan_device
from verl_lite.planner.recommend import recommend
from verl_lite.planner.request import GB, Choice, Request
from verl_lite.planner.role_engines import fsdp_mode

log = logging.getLogger(__name__)


def auto_offload(
    cfg: PPOTrainerConfig,
    reported_gb: list[float],
    accelerator: bool | None = None,
    host_gb: float | None = None,
) -> tuple[dict[str, object], str]:
    """trainer.auto_offload: the planner's overrides for the smallest device the workers report (or
    trainer.device_memory_gb when set) and, on GPUs, `host_gb` of host memory per node (the least
    available on a node before the workers start; on CPUs the device is the host, planned as such),
    and the log line saying what was chosen and why. ValueError naming the key when nothing fits."""
    t, a = cfg.trainer, cfg.actor_rollout_ref.actor
    if not t.device_memory_gb and not reported_gb:
        raise ValueError("no worker's device was probed (no Ray); set trainer.device_memory_gb")
    budget = t.device_memory_gb or min(reported_gb)
    source = "trainer.device_memory_gb" if t.device_memory_gb else "the smallest device the workers report"
    shape = read_shape(cfg.actor_rollout_ref.model.path)
    gpus = cfg.trainer.device != "cpu" if accelerator is None else accelerator
    req = Request(cfg, shape, world_size(cfg), budget, host_gb if gpus else None, gpus)
    host = (
        f"{req.host_gb:.1f} GB of host per node (the least available on a node)"
        if req.host_gb is not None
        else "host unchecked (" + ("not reported)" if req.accelerator else "CPUs: the device is the host)")
    )
    try:
        rec = recommend(req)
    except ValueError as e:
        raise ValueError(f"trainer.auto_offload=True: {e}") from e
    before = " ".join(
        f"{k}={getattr(a.fsdp_config, k)}" for k in ("offload_policy", "param_offload", "optimizer_offload")
    )
    chosen = " ".join(f"actor_rollout_ref.{k}={v}" for k, v in rec.overrides.items())
    message = (
        f"auto_offload: {budget:.2f} GB per device ({source}), {host}; chose {chosen} (was {before} "
        f"ppo_micro_batch_size_per_gpu={a.ppo_micro_batch_size_per_gpu}) because {rec.reason}"
    )
    return rec.overrides, message


def resolve_auto_offload(cfg: PPOTrainerConfig, run: Run, slots: list[tuple[float, float]]) -> list[str]:
    """The resolve step once the workers' slots are probed (preflight.py RESOLVE_DEVICES; `slots`:
    each slot's (device, its node's available host) GiB): with trainer.auto_offload, the planner's
    choice (auto_offload), set as if given on the command line (keys linked to them follow) and
    logged with why; the checks then run on it, before the freeze."""
    if not cfg.trainer.auto_offload:
        return []
    host = min((h for _, h in slots), default=None)
    try:
        overrides, message = auto_offload(cfg, [d for d, _ in slots], accelerator=run.use_gpu, host_gb=host)
    except ValueError as e:
        return [str(e)]
    log.info(message)
    apply_to_config(cfg, {f"actor_rollout_ref.{k}": v for k, v in overrides.items()})
    return []


def resolve_idle_on_host(cfg: PPOTrainerConfig, run: Run, slots: list[tuple[float, float]]) -> list[str]:
    """The resolve step after auto_offload (preflight.py RESOLVE_DEVICES): on GPUs, a critic or reward
    model beside the actor whose state the device would not hold resident through the step waits on
    the host between its phases -- its fsdp section's param_offload and optimizer_offload set True
    (offload_policy already keeps everything there), logged with the plan; as it stays when it fits,
    as in verl, where only a role's own fsdp section offloads it. Never on CPUs (the device is the
    host)."""
    roles = [role for role, on in (("critic", run.critic), ("reward_model", cfg.reward_model.enable)) if on]
    if not (run.use_gpu and roles and slots):
        return []
    idle, message = idle_on_host(cfg, [d for d, _ in slots], accelerator=True)
    log.info(message)
    if idle:
        sections = [FSDP_SECTIONS[r] for r in roles if not lookup(cfg, f"{FSDP_SECTIONS[r]}.offload_policy")]
        apply_to_config(
            cfg, {f"{s}.{k}": True for s in sections for k in ("param_offload", "optimizer_offload")}
        )
    return []


def idle_on_host(cfg: PPOTrainerConfig, reported_gb: list[float], accelerator: bool) -> tuple[bool, str]:
    """Whether the critic / reward model beside the actor on each GPU wait on the host
    between their phases, on the smallest device the workers report (or trainer.device_memory_gb),
    and the log line saying so."""
    budget = cfg.trainer.device_memory_gb or min(reported_gb)
    a = cfg.actor_rollout_ref.actor
    micro = 0 if a.use_dynamic_bsz else (a.ppo_micro_batch_size_per_gpu or 1)
    req = Request(
        cfg, read_shape(cfg.actor_rollout_ref.model.path), world_size(cfg), budget, accelerator=accelerator
    )
    actor = Choice(fsdp_mode(a.fsdp_config), micro)
    idle = colocated_idle_on_host(req, actor)
    where = (
        "wait in host memory between their phases (the device would not hold them resident: their "
        "param_offload and optimizer_offload set True; traffic in perf/offload/<role>/*)"
        if idle
        else "stay on the device between their phases, as their fsdp_config says (the plan fits)"
    )
    peak = plan_device(req, actor, idle_on_host=idle).peak
    message = (
        f"critic / reward model share each {budget:.2f} GB device with the actor: their params and "
        f"optimizer state {where}; planned peak {peak / GB:.2f} GB"
    )
    return idle, message
