"""The recommendation: for each offload mode of the actor (none, param+optimizer offload,
offload_policy), memory lever (fused log-probs, activation offload) and micro-batch size, the plan of
every phase (phases.py), then the cheapest candidate that fits with the largest micro-batch that fits.

Cheapest means fewest host copies: first what copies nothing (no offload; fused log-probs, which trade
the logits for recomputing them in chunks), then manual param+optimizer offload (copies at phase
boundaries), then what copies every micro-batch: activation offload (saved activations), then
offload_policy (every layer's parameters, and the optimizer steps on the host). The levers configured
are always on. Sequence parallelism and HSDP change the batch geometry or the sharding, so the planner
accounts for them as configured and, when nothing fits, says what sequence parallelism would give.
A candidate fits when its peak is at most HEADROOM of the device's memory and its host bytes at most
HEADROOM of the node's (when known): fragmentation is not modelled.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.engine.mesh import heads_problem, sp_size_problem
from verl_lite.planner.engine_setup import MODES
from verl_lite.planner.phases import DevicePlan, plan_device
from verl_lite.planner.request import GB, HEADROOM, LEVERS, Choice, Request
from verl_lite.planner.role_engines import actor_levers


@dataclass
class Row:
    mode: str
    levers: tuple[str, ...]  # switched on by the planner (configured ones are on in every row)
    micro: int
    estimate: DevicePlan
    fits: bool
    host_per_node: int  # bytes on one node's host at its peak (phases.DevicePlan.host_peak_per_rank)


@dataclass
class Recommendation:
    mode: str
    levers: tuple[str, ...]
    micro: int
    overrides: dict[str, object]  # dotted keys under actor_rollout_ref, for init_model(overrides)
    reason: str


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
    """Powers of two that divide the mini-batch of one data-parallel rank (a group of
    ulysses_sequence_parallel_size ranks), and the configured size."""
    a = cfg.actor_rollout_ref.actor
    mini = max(
        1,
        a.ppo_mini_batch_size
        * cfg.actor_rollout_ref.rollout.n
        // max(1, world // a.ulysses_sequence_parallel_size),
    )
    sizes = {m for m in (2**k for k in range(16)) if m <= mini and mini % m == 0}
    configured = cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
    if configured and mini % configured == 0:
        sizes.add(configured)
    return sorted(sizes)


def plan_rows(req: Request) -> list[Row]:
    """One row per candidate (mode, levers) and micro of the actor."""
    cfg = req.cfg
    micros = [0] if cfg.actor_rollout_ref.actor.use_dynamic_bsz else micro_candidates(cfg, req.world)
    ranks_per_node = min(req.world, cfg.trainer.n_gpus_per_node)
    rows = []
    for mode, switched in candidates(cfg, req.levers):
        for micro in micros:
            est = plan_device(req, Choice(mode, micro, switched))
            host = ranks_per_node * est.host_peak_per_rank
            fits = est.peak <= HEADROOM * req.device_gb * GB
            if req.host_gb is not None:
                fits = fits and host <= HEADROOM * req.host_gb * GB
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


def label(mode: str, levers: tuple[str, ...]) -> str:
    return "+".join((mode, *levers))


def recommend(req: Request) -> Recommendation:
    """The cheapest (mode, levers) that fits, with its largest fitting micro-batch; ValueError if none fits."""
    rows = plan_rows(req)
    order = candidates(req.cfg, req.levers)
    budget_gb, host_budget_gb = req.device_gb, req.host_gb
    for index, (mode, levers) in enumerate(order):
        fitting = [r for r in rows if (r.mode, r.levers) == (mode, levers) and r.fits]
        if not fitting:
            continue
        best = max(fitting, key=lambda r: r.micro)
        cheaper = [label(*c) for c in order[:index]]
        why = (
            f"{', '.join(cheaper)} do{'es' if len(cheaper) == 1 else ''} not fit even at the smallest micro-batch; "
            if cheaper
            else ""
        )
        est = best.estimate
        reason = (
            f"{why}{label(mode, levers)} with micro-batch {best.micro or 'dynamic'} peaks at "
            f"{est.peak / GB:.2f} GB ({est.peak_phase}) of {budget_gb:.2f} GB ({HEADROOM:.0%} headroom: "
            f"{HEADROOM * budget_gb:.2f} GB) on each of {req.world} devices; host {best.host_per_node / GB:.1f} GB "
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
            f"{label(least.mode, least.levers)} with micro-batch {least.micro or 'dynamic'}, needs {need:.1f} GB "
            f"per node ({HEADROOM:.0%} headroom: {HEADROOM * host_budget_gb:.1f} GB); a node with "
            f"{need / HEADROOM:.1f} GB of host memory would hold it, or set trainer.auto_offload=False to try "
            "anyway"
        )
    smallest = min(rows, key=lambda r: r.estimate.peak)
    raise ValueError(
        f"no offload mode fits {budget_gb:.2f} GB per device: the smallest estimate is "
        f"{smallest.estimate.peak / GB:.2f} GB ({label(smallest.mode, smallest.levers)}, micro-batch "
        f"{smallest.micro or 'dynamic'}, in {smallest.estimate.peak_phase}); "
        f"{sequence_parallel_hint(req)}add devices "
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


def sequence_parallel_hint(req: Request) -> str:
    """What a larger ulysses_sequence_parallel_size would give (the planner does not apply it: it
    changes the data-parallel size and so the batch geometry), or "" when none is possible."""
    current = req.cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size
    sizes = [  # the sizes start-up would accept (engine/mesh.py, engine/ulysses.py: the rules, once)
        k
        for k in (2, 4, 8)
        if k > current
        and sp_size_problem(req.world, k, "") is None
        and heads_problem(req.shape.heads, k, "", "") is None
    ]
    for sp in sizes:
        rows = plan_rows(replace(req, cfg=with_sequence_parallel(req.cfg, sp), host_gb=None))
        best = min(rows, key=lambda r: r.estimate.peak)
        if best.fits or sp == sizes[-1]:
            verdict = "fits" if best.fits else "still does not fit"
            return (
                f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={sp} gives {best.estimate.peak / GB:.2f} "
                f"GB ({label(best.mode, best.levers)}, micro-batch {best.micro or 'dynamic'}: {verdict}); "
            )
    return ""
