"""The memory planner: `python -m verl_lite.plan [--device-memory-gb 24] key=value ...`.

Takes the same Hydra overrides as `verl_lite.main_ppo`, reads the model's shape from its
config.json, and prints for each offload mode of the actor (none, param+optimizer offload,
offload_policy), memory lever (fused log-probs, activation offload) and micro-batch size the
estimated bytes per device in every phase of a step (plan_memory.py: all roles sharing the device
and the rollout; engine/memory_model.py: each engine's terms) and per node in host memory, then
recommends the cheapest candidate that fits with the largest micro-batch that fits. Cheapest means
fewest host copies: first what copies nothing (no offload; fused log-probs, which trade the logits
for recomputing them in chunks), then manual param+optimizer offload (copies at phase boundaries),
then what copies every micro-batch: activation offload (saved activations), then offload_policy
(every layer's parameters, and the optimizer steps on the host). The levers configured are always
on. Sequence parallelism and HSDP change the batch geometry or the sharding, so the planner
accounts for them as configured and, when nothing fits, says what sequence parallelism would give.

A configuration fits when its peak is at most HEADROOM of the device's memory and its host bytes
at most HEADROOM of the node's (when known): fragmentation is not modelled. The plan is for GPUs
(pinned host copies, vLLM's sleep mode) unless trainer.device=cpu. With `trainer.auto_offload=True`
start-up's `resolve_auto_offload` sets what `recommend` gives for the memory the workers' devices
report, before the checks run on it and the config is frozen.
"""

from __future__ import annotations

import argparse
import copy
import logging
import sys
from dataclasses import dataclass

from verl_lite.config.common import world_size
from verl_lite.config.overrides import apply_to_config
from verl_lite.config.run import Run
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.engine.memory_model import MODES, ModelShape, read_shape
from verl_lite.engine.mesh import sp_size_problem
from verl_lite.engine.ulysses import heads_problem
from verl_lite.errors import one_line
from verl_lite.plan_memory import (
    HEADROOM,
    LEVERS,
    DevicePlan,
    actor_levers,
    colocated_idle_on_host,
    fsdp_mode,
    lora_fields,
    plan_device,
)
from verl_lite.utils.table import Column, Table

GB = 1024**3
log = logging.getLogger(__name__)


@dataclass
class Row:
    mode: str
    levers: tuple[str, ...]  # switched on by the planner (configured ones are on in every row)
    micro: int
    estimate: DevicePlan
    fits: bool
    host_per_node: int  # bytes on one node's host at its peak (plan_memory.DevicePlan.host_peak_per_rank)


@dataclass
class Recommendation:
    mode: str
    levers: tuple[str, ...]
    micro: int
    overrides: dict[str, object]  # dotted keys under actor_rollout_ref, for init_model(overrides)
    reason: str


def local_mini(cfg: PPOTrainerConfig, world: int) -> int:
    """Responses per mini-batch of one data-parallel rank (a group of ulysses_sequence_parallel_size)."""
    a = cfg.actor_rollout_ref.actor
    dp = max(1, world // a.ulysses_sequence_parallel_size)
    return max(1, a.ppo_mini_batch_size * cfg.actor_rollout_ref.rollout.n // dp)


LEVER_STEPS = ((), ("fused",), ("fused", "activation_offload"))
LEVER_KEYS = {  # what turns a lever on (under actor_rollout_ref)
    "fused": ("model.use_fused_kernels", "actor.use_fused_kernels"),
    "activation_offload": ("model.enable_activation_offload",),
}


def proposable_levers() -> tuple[str, ...]:
    """The levers whose keys the config accepts at True (config/support.py): only those are proposed."""
    from verl_lite.config.support import ANY, FOLLOWS, rule_for

    def accepts(key: str) -> bool:  # FOLLOWS: the key follows one the planner sets with it
        rule = rule_for(f"actor_rollout_ref.{key}")
        return (
            rule is None
            or rule.accepted in (ANY, FOLLOWS)
            or (isinstance(rule.accepted, tuple) and True in rule.accepted)
        )

    return tuple(lever for lever in LEVERS if all(accepts(k) for k in LEVER_KEYS[lever]))


def candidates(
    cfg: PPOTrainerConfig, levers: tuple[str, ...] | None = None
) -> list[tuple[str, tuple[str, ...]]]:
    """(mode, levers) from the cheapest: what copies nothing to the host, then copies at phase
    boundaries, then copies every micro-batch (activation offload before offload_policy). `levers`:
    those the planner may propose (default: proposable_levers()); those configured on are on in
    every candidate and not proposed again."""
    allowed = proposable_levers() if levers is None else levers
    configured = actor_levers(cfg)
    on = {"fused": configured["fused"], "activation_offload": configured["activation_offload"]}
    steps = list(dict.fromkeys(tuple(k for k in st if on[k] or k in allowed) for st in LEVER_STEPS))

    def cost(item):
        mode, step = item
        per_micro = "activation_offload" in step or mode == "offload_policy"
        return (per_micro, mode == "offload_policy", MODES.index(mode), len(step))

    out, seen = [], set()
    for mode, step in sorted(((m, st) for m in MODES for st in steps), key=cost):
        effective = (mode, tuple(k for k in LEVERS if on[k] or k in step))
        if effective not in seen:
            seen.add(effective)
            out.append((mode, tuple(k for k in step if not on[k])))
    return out


def micro_candidates(cfg: PPOTrainerConfig, world: int) -> list[int]:
    """Powers of two that divide the per-worker mini-batch, and the configured size."""
    mini = local_mini(cfg, world)
    sizes = {m for m in (2**k for k in range(16)) if m <= mini and mini % m == 0}
    configured = cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
    if configured and mini % configured == 0:
        sizes.add(configured)
    return sorted(sizes)


def targets_accelerator(cfg: PPOTrainerConfig) -> bool:
    """Plans are for GPUs (pinned host copies, vLLM's sleep mode) unless the run asks for CPUs."""
    return cfg.trainer.device != "cpu"


def plan_rows(
    cfg: PPOTrainerConfig,
    shape: ModelShape,
    world: int,
    budget_gb: float,
    host_budget_gb: float | None = None,
    accelerator: bool | None = None,
    levers: tuple[str, ...] | None = None,
) -> list[Row]:
    """One row per candidate (mode, levers) and micro of the actor; `host_budget_gb`: one node's host
    memory, or None; `levers`: what the planner may switch on (default: what the config accepts)."""
    accelerator = targets_accelerator(cfg) if accelerator is None else accelerator
    micros = [0] if cfg.actor_rollout_ref.actor.use_dynamic_bsz else micro_candidates(cfg, world)
    ranks_per_node = min(world, cfg.trainer.n_gpus_per_node)
    rows = []
    for mode, switched in candidates(cfg, levers):
        for micro in micros:
            est = plan_device(cfg, shape, world, mode, micro, int(budget_gb * GB), accelerator, switched)
            host = ranks_per_node * est.host_peak_per_rank
            fits = est.peak <= HEADROOM * budget_gb * GB
            if host_budget_gb is not None:
                fits = fits and host <= HEADROOM * host_budget_gb * GB
            rows.append(Row(mode, switched, micro, est, fits, host))
    return rows


def _overrides(mode: str, levers: tuple[str, ...], micro: int) -> dict[str, object]:
    out: dict[str, object] = {
        "actor.fsdp_config.offload_policy": mode == "offload_policy",
        "actor.fsdp_config.param_offload": mode == "param_optimizer_offload",
        "actor.fsdp_config.optimizer_offload": mode == "param_optimizer_offload",
    }
    if mode != "offload_policy":
        out["actor.fsdp_config.gradient_offload"] = False
    for lever in levers:
        out.update(dict.fromkeys(LEVER_KEYS[lever], True))
    if micro:
        out["actor.ppo_micro_batch_size_per_gpu"] = micro
    return out


def _name(mode: str, levers: tuple[str, ...]) -> str:
    return "+".join((mode, *levers))


def recommend(
    cfg: PPOTrainerConfig,
    shape: ModelShape,
    world: int,
    budget_gb: float,
    host_budget_gb: float | None = None,
    accelerator: bool | None = None,
    levers: tuple[str, ...] | None = None,
) -> Recommendation:
    """The cheapest (mode, levers) that fits, with its largest fitting micro-batch; ValueError if none fits."""
    rows = plan_rows(cfg, shape, world, budget_gb, host_budget_gb, accelerator, levers)
    order = candidates(cfg, levers)
    for index, (mode, levers) in enumerate(order):
        fitting = [r for r in rows if (r.mode, r.levers) == (mode, levers) and r.fits]
        if not fitting:
            continue
        best = max(fitting, key=lambda r: r.micro)
        cheaper = [_name(*c) for c in order[:index]]
        why = (
            f"{', '.join(cheaper)} do{'es' if len(cheaper) == 1 else ''} not fit even at the smallest micro-batch; "
            if cheaper
            else ""
        )
        est = best.estimate
        reason = (
            f"{why}{_name(mode, levers)} with micro-batch {best.micro or 'dynamic'} peaks at "
            f"{est.peak / GB:.2f} GB ({est.peak_phase}) of {budget_gb:.2f} GB ({HEADROOM:.0%} headroom: "
            f"{HEADROOM * budget_gb:.2f} GB) on each of {world} devices; host {best.host_per_node / GB:.1f} GB "
            "per node"
            + (
                "; the critic / reward model wait on the host between their phases"
                if est.idle_on_host
                else ""
            )
        )
        return Recommendation(mode, levers, best.micro, _overrides(mode, levers, best.micro), reason)
    device_fits = [r for r in rows if r.estimate.peak <= HEADROOM * budget_gb * GB]
    if host_budget_gb is not None and device_fits:  # the host stops them: say what would hold one
        least = min(device_fits, key=lambda r: (r.host_per_node, r.estimate.peak))
        need = least.host_per_node / GB
        raise ValueError(
            f"no offload mode fits {host_budget_gb:.1f} GB of host memory per node: {len(device_fits)} "
            f"candidates fit {budget_gb:.2f} GB per device, and the one needing the least host, "
            f"{_name(least.mode, least.levers)} with micro-batch {least.micro or 'dynamic'}, needs {need:.1f} GB "
            f"per node ({HEADROOM:.0%} headroom: {HEADROOM * host_budget_gb:.1f} GB); a node with "
            f"{need / HEADROOM:.1f} GB of host memory would hold it, or set trainer.auto_offload=False to try "
            "anyway"
        )
    smallest = min(rows, key=lambda r: r.estimate.peak)
    raise ValueError(
        f"no offload mode fits {budget_gb:.2f} GB per device: the smallest estimate is "
        f"{smallest.estimate.peak / GB:.2f} GB ({_name(smallest.mode, smallest.levers)}, micro-batch "
        f"{smallest.micro or 'dynamic'}, in {smallest.estimate.peak_phase}); "
        f"{sequence_parallel_hint(cfg, shape, world, budget_gb, accelerator, levers)}add devices "
        "(trainer.n_gpus_per_node), shorten "
        "data.max_prompt_length / max_response_length, enable "
        "actor_rollout_ref.model.enable_gradient_checkpointing, use mixed_precision.param_dtype=bf16, lower "
        "the log-prob micro-batch sizes or rollout.gpu_memory_utilization, or set trainer.auto_offload=False "
        "to try anyway"
    )


def with_sequence_parallel(cfg: PPOTrainerConfig, sp: int) -> PPOTrainerConfig:
    """A copy of `cfg` with the actor and the reference at ulysses_sequence_parallel_size `sp`."""
    out = copy.deepcopy(cfg)
    out.actor_rollout_ref.actor.ulysses_sequence_parallel_size = sp
    out.actor_rollout_ref.ref.ulysses_sequence_parallel_size = sp
    return out


def sequence_parallel_hint(
    cfg: PPOTrainerConfig,
    shape: ModelShape,
    world: int,
    budget_gb: float,
    accelerator: bool | None,
    levers: tuple[str, ...] | None,
) -> str:
    """What a larger ulysses_sequence_parallel_size would give (the planner does not apply it: it
    changes the data-parallel size and so the batch geometry), or "" when none is possible."""
    current = cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size
    sizes = [  # the sizes start-up would accept (engine/mesh.py, engine/ulysses.py: the rules, once)
        k
        for k in (2, 4, 8)
        if k > current
        and sp_size_problem(world, k, "") is None
        and heads_problem(shape.heads, k, "", "") is None
    ]
    for sp in sizes:
        rows = plan_rows(with_sequence_parallel(cfg, sp), shape, world, budget_gb, None, accelerator, levers)
        best = min(rows, key=lambda r: r.estimate.peak)
        if best.fits or sp == sizes[-1]:
            verdict = "fits" if best.fits else "still does not fit"
            return (
                f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={sp} gives {best.estimate.peak / GB:.2f} "
                f"GB ({_name(best.mode, best.levers)}, micro-batch {best.micro or 'dynamic'}: {verdict}); "
            )
    return ""


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
    budget = t.device_memory_gb or min(reported_gb)
    source = "trainer.device_memory_gb" if t.device_memory_gb else "the smallest device the workers report"
    gpus = targets_accelerator(cfg) if accelerator is None else accelerator
    host_budget = host_gb if gpus else None
    host = (
        f"{host_budget:.1f} GB of host per node (the least available on a node)"
        if host_budget is not None
        else "host unchecked (" + ("not reported)" if gpus else "CPUs: the device is the host)")
    )
    shape = read_shape(cfg.actor_rollout_ref.model.path)
    try:
        rec = recommend(cfg, shape, world_size(cfg), budget, host_budget, accelerator=accelerator)
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


def idle_on_host(cfg: PPOTrainerConfig, reported_gb: list[float], accelerator: bool) -> tuple[bool, str]:
    """For the trainer: whether the critic / reward model beside the actor on each GPU wait on the host
    between their phases (plan_memory.colocated_idle_on_host, for the actor as configured, after
    trainer.auto_offload), on the smallest device the workers report (or trainer.device_memory_gb),
    and the log line saying so."""
    budget = cfg.trainer.device_memory_gb or min(reported_gb)
    a = cfg.actor_rollout_ref.actor
    micro = 0 if a.use_dynamic_bsz else (a.ppo_micro_batch_size_per_gpu or 1)
    world = world_size(cfg)
    shape = read_shape(cfg.actor_rollout_ref.model.path)
    args = (cfg, shape, world, fsdp_mode(a.fsdp_config), micro, int(budget * GB), accelerator)
    idle = colocated_idle_on_host(*args)
    where = (
        "wait in host memory between their phases (the device would not hold them resident; traffic in "
        "perf/offload/<role>/*)"
        if idle
        else "stay on the device between their phases, as their fsdp_config says (the plan fits)"
    )
    peak = plan_device(*args, idle_on_host=idle).peak
    message = (
        f"critic / reward model share each {budget:.2f} GB device with the actor: their params and "
        f"optimizer state {where}; planned peak {peak / GB:.2f} GB"
    )
    return idle, message


TABLE_TERMS = ("params", "grads", "grad_accum", "optimizer", "step_temp", "gathered", "activations")


def format_table(rows: list[Row]) -> str:
    """One line per (mode, micro): the actor's main terms, then each phase's total and the peak; MB for
    models too small to show in GB."""
    unit, scale = ("GB", GB) if max(r.estimate.peak for r in rows) >= GB else ("MB", 1024**2)
    phases = list(rows[0].estimate.phases)
    cols = [*TABLE_TERMS, *phases, "peak", "host/node"]
    width = max(12, max(len(c) for c in cols) + 2)
    name = max(24, *(len(_name(r.mode, r.levers)) + 2 for r in rows))
    numbers = [Column(c, width, ".3f") for c in cols]
    table = Table(Column("mode+levers", name, align="<"), Column("micro", 6), *numbers, Column("fits", 6))
    lines = [f"estimated {unit} per device (host: per node)", table.header(), table.rule()]
    for r in rows:
        e = r.estimate
        values = [e.engines["actor"].terms[t] for t in TABLE_TERMS]
        values += [e.phases[p] for p in phases] + [e.peak, r.host_per_node]
        scaled = [v / scale for v in values]
        lines.append(
            table.line(_name(r.mode, r.levers), r.micro or "dyn", *scaled, "yes" if r.fits else "no")
        )
    return "\n".join(lines)


def compose_config(overrides: list[str], config_name: str = "ppo_trainer") -> PPOTrainerConfig:
    """The same config main_ppo composes (Hydra compose API), through start-up's RESOLVE steps (the
    planner counts the rollout backend rollout.name=auto resolves to)."""
    from verl_lite.config.compose import load_config
    from verl_lite.config.errors import ConfigError
    from verl_lite.config.normalize import derive_values
    from verl_lite.data.assets import resolve_paths
    from verl_lite.roles import run_of
    from verl_lite.rollout.checks import resolve_rollout

    cfg = load_config(overrides, config_name)
    run = run_of(cfg, num_gpus=0)
    problems = [p for step in (resolve_paths, derive_values, resolve_rollout) for p in step(cfg, run)]
    if problems:
        raise ConfigError(problems)
    return cfg


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_lite.plan", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--device-memory-gb",
        type=float,
        default=None,
        help="memory of one device in GB; default: this machine's GPU (or available host memory)",
    )
    parser.add_argument(
        "--config-name", default="ppo_trainer", help="the named config, as main_ppo's (e.g. demo)"
    )
    parser.add_argument(
        "--host-memory-gb",
        type=float,
        default=None,
        help="host memory of one node in GB: configurations whose host bytes exceed it do not fit "
        "(default: the host is reported, not checked)",
    )
    args, overrides = parser.parse_known_args(argv)
    try:
        return _plan(args, overrides)
    except ValueError as e:  # a bad override, model folder or size: one line, as main_ppo says it
        print(f"python -m verl_lite.plan: {one_line(e)}", file=sys.stderr)
        return 2


def _plan(args, overrides: list[str]) -> int:
    cfg = compose_config(overrides, args.config_name)
    world = world_size(cfg)
    budget, host_budget = args.device_memory_gb, args.host_memory_gb
    if budget is None:
        from verl_lite.utils import device as dev

        budget = dev.device_memory_total_gb()
        print(f"--device-memory-gb not given: planning for this machine's {budget:.2f} GB")
    shape = read_shape(cfg.actor_rollout_ref.model.path)
    count = f"{shape.num_params / 1e9:.3f}B" if shape.num_params >= 1e9 else f"{shape.num_params / 1e6:.3f}M"
    print(
        f"model {cfg.actor_rollout_ref.model.path}: {count} params "
        f"(hidden {shape.hidden}, layers {shape.layers}, vocab {shape.vocab}, intermediate "
        f"{shape.intermediate}, heads {shape.heads}/{shape.kv_heads}); {world} devices of {budget:.2f} GB, "
        f"host {'unchecked' if host_budget is None else f'{host_budget:.1f} GB per node'}; "
        f"planned for {'GPUs' if targets_accelerator(cfg) else 'CPUs'}"
    )
    lora = lora_fields(cfg.actor_rollout_ref.model, "causal_lm")
    if lora:
        print(
            f"LoRA rank {lora['lora_rank']} on {', '.join(lora['lora_targets'])}: grads and optimizer state "
            "only for the adapters; the reference is the actor with its adapters off (no reference engine)"
        )
    print("actor terms at its update; then each phase's device total (every role and the rollout); peak adds")
    print(
        "each process's CUDA context and NCCL buffers; host/node: offloaded state, or a model loading beside it"
    )
    print(format_table(plan_rows(cfg, shape, world, budget, host_budget)))
    try:
        rec = recommend(cfg, shape, world, budget, host_budget)
    except ValueError as e:
        print(f"recommendation: none -- {e}")
        return 1
    print(f"recommendation: {rec.reason}")
    print("overrides: " + " ".join(f"actor_rollout_ref.{k}={v}" for k, v in rec.overrides.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
