"""The memory planner: `python -m verl_lite.plan [--device-memory-gb 24] key=value ...`.

Takes the same Hydra overrides as `verl_lite.main_ppo`, reads the model's shape from its
config.json, and prints for each offload mode of the actor (none, param+optimizer offload,
offload_policy) and micro-batch size the estimated bytes per device in every phase of a step
(plan_memory.py: all roles sharing the device and the rollout; engine/memory_model.py: each
engine's terms) and per node in host memory, then recommends the cheapest mode that fits with the
largest micro-batch that fits. Cheapest means fewest host copies: no offload, then manual
param+optimizer offload (copies at phase boundaries), then offload_policy (copies every layer,
every micro-batch, and steps on the host).

A configuration fits when its peak is at most HEADROOM of the device's memory and its host bytes
at most HEADROOM of the node's (when known): fragmentation is not modelled. The plan is for GPUs
(pinned host copies, vLLM's sleep mode) unless trainer.device=cpu. With `trainer.auto_offload=True`
the trainer calls `recommend` at start-up with the memory the workers report and applies the result.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass

from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.engine.memory_model import MODES, ModelShape, read_shape
from verl_lite.plan_memory import DevicePlan, lora_fields, plan_device

GB = 1024**3
HEADROOM = 0.9  # the top of the healthy memory range (trainer/health.py)
log = logging.getLogger(__name__)


@dataclass
class Row:
    mode: str
    micro: int
    estimate: DevicePlan
    fits: bool
    host_per_node: int  # bytes on one node's host at its peak (while an engine loads)


@dataclass
class Recommendation:
    mode: str
    micro: int
    overrides: dict[str, object]  # dotted keys under actor_rollout_ref, for init_model(overrides)
    reason: str


def local_mini(cfg: PPOTrainerConfig, world: int) -> int:
    a = cfg.actor_rollout_ref.actor
    return max(1, a.ppo_mini_batch_size * cfg.actor_rollout_ref.rollout.n // world)


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
) -> list[Row]:
    """One row per (mode, micro) of the actor; `host_budget_gb`: one node's host memory, or None."""
    accelerator = targets_accelerator(cfg) if accelerator is None else accelerator
    micros = [0] if cfg.actor_rollout_ref.actor.use_dynamic_bsz else micro_candidates(cfg, world)
    ranks_per_node = min(world, cfg.trainer.n_gpus_per_node)
    rows = []
    for mode in MODES:
        for micro in micros:
            est = plan_device(cfg, shape, world, mode, micro, int(budget_gb * GB), accelerator)
            host = ranks_per_node * est.host_peak_per_rank
            fits = est.peak <= HEADROOM * budget_gb * GB
            if host_budget_gb is not None:
                fits = fits and host <= HEADROOM * host_budget_gb * GB
            rows.append(Row(mode, micro, est, fits, host))
    return rows


def _overrides(mode: str, micro: int) -> dict[str, object]:
    out: dict[str, object] = {
        "actor.fsdp_config.offload_policy": mode == "offload_policy",
        "actor.fsdp_config.param_offload": mode == "param_optimizer_offload",
        "actor.fsdp_config.optimizer_offload": mode == "param_optimizer_offload",
    }
    if mode != "offload_policy":
        out["actor.fsdp_config.gradient_offload"] = False
    if micro:
        out["actor.ppo_micro_batch_size_per_gpu"] = micro
    return out


def recommend(
    cfg: PPOTrainerConfig,
    shape: ModelShape,
    world: int,
    budget_gb: float,
    host_budget_gb: float | None = None,
    accelerator: bool | None = None,
) -> Recommendation:
    """The cheapest mode that fits, with its largest fitting micro-batch; ValueError if none fits."""
    rows = plan_rows(cfg, shape, world, budget_gb, host_budget_gb, accelerator)
    for mode in MODES:
        fitting = [r for r in rows if r.mode == mode and r.fits]
        if not fitting:
            continue
        best = max(fitting, key=lambda r: r.micro)
        cheaper = list(MODES[: MODES.index(mode)])
        why = (
            f"{', '.join(cheaper)} do{'es' if len(cheaper) == 1 else ''} not fit even at the smallest micro-batch; "
            if cheaper
            else ""
        )
        est = best.estimate
        reason = (
            f"{why}{mode} with micro-batch {best.micro or 'dynamic'} peaks at {est.peak / GB:.2f} GB "
            f"({est.peak_phase}) of {budget_gb:.2f} GB ({HEADROOM:.0%} headroom: {HEADROOM * budget_gb:.2f} GB) "
            f"on each of {world} devices; host {best.host_per_node / GB:.1f} GB per node"
        )
        return Recommendation(mode, best.micro, _overrides(mode, best.micro), reason)
    smallest = min(rows, key=lambda r: r.estimate.peak)
    host_note = ""
    if host_budget_gb is not None and smallest.estimate.peak <= HEADROOM * budget_gb * GB:
        host_note = (
            f" (its device peak fits, but the host needs {smallest.host_per_node / GB:.1f} GB per node of "
            f"{host_budget_gb:.1f} GB)"
        )
    raise ValueError(
        f"no offload mode fits {budget_gb:.2f} GB per device: the smallest estimate is "
        f"{smallest.estimate.peak / GB:.2f} GB ({smallest.mode}, micro-batch {smallest.micro or 'dynamic'}, "
        f"in {smallest.estimate.peak_phase}){host_note}; add devices (trainer.n_gpus_per_node), shorten "
        "data.max_prompt_length / max_response_length, enable "
        "actor_rollout_ref.model.enable_gradient_checkpointing, use mixed_precision.param_dtype=bf16, lower "
        "the log-prob micro-batch sizes or rollout.gpu_memory_utilization, or set trainer.auto_offload=False "
        "to try anyway"
    )


def auto_offload(
    cfg: PPOTrainerConfig, reported_gb: list[float], accelerator: bool | None = None
) -> tuple[dict[str, object], str]:
    """trainer.auto_offload: the planner's overrides for the smallest device the workers report (or
    trainer.device_memory_gb when set), and the log line saying what was chosen and why."""
    world = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    budget = cfg.trainer.device_memory_gb or min(reported_gb)
    source = (
        "trainer.device_memory_gb"
        if cfg.trainer.device_memory_gb
        else "the smallest device the workers report"
    )
    shape = read_shape(cfg.actor_rollout_ref.model.path)
    try:
        rec = recommend(cfg, shape, world, budget, accelerator=accelerator)
    except ValueError as e:
        raise ValueError(f"trainer.auto_offload=True: {e}") from e
    fsdp = cfg.actor_rollout_ref.actor.fsdp_config
    before = (
        f"offload_policy={fsdp.offload_policy} param_offload={fsdp.param_offload} "
        f"optimizer_offload={fsdp.optimizer_offload} "
        f"ppo_micro_batch_size_per_gpu={cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu}"
    )
    chosen = " ".join(f"actor_rollout_ref.{k}={v}" for k, v in rec.overrides.items())
    message = (
        f"auto_offload: {budget:.2f} GB per device ({source}); chose {chosen} (was {before}) "
        f"because {rec.reason}"
    )
    return rec.overrides, message


TABLE_TERMS = ("params", "grads", "grad_accum", "optimizer", "step_temp", "gathered", "activations")


def format_table(rows: list[Row]) -> str:
    """One line per (mode, micro): the actor's main terms, then each phase's total and the peak; MB for
    models too small to show in GB."""
    unit, scale = ("GB", GB) if max(r.estimate.peak for r in rows) >= GB else ("MB", 1024**2)
    phases = list(rows[0].estimate.phases)
    cols = [*TABLE_TERMS, *phases, "peak", "host/node"]
    width = max(12, max(len(c) for c in cols) + 2)
    head = f"{'mode':<24}{'micro':>6}" + "".join(f"{c:>{width}}" for c in cols) + f"{'fits':>6}"
    lines = [f"estimated {unit} per device (host: per node)", head, "-" * len(head)]
    for r in rows:
        e = r.estimate
        values = [e.engines["actor"].terms[t] for t in TABLE_TERMS]
        values += [e.phases[p] for p in phases] + [e.peak, r.host_per_node]
        lines.append(
            f"{r.mode:<24}{r.micro or 'dyn':>6}"
            + "".join(f"{v / scale:>{width}.3f}" for v in values)
            + f"{'yes' if r.fits else 'no':>6}"
        )
    return "\n".join(lines)


def compose_config(overrides: list[str], config_name: str = "ppo_trainer") -> PPOTrainerConfig:
    """The same config main_ppo composes (Hydra compose API), normalised, model path resolved."""
    from verl_lite.config.compose import load_config
    from verl_lite.config.validate import ConfigError, normalize
    from verl_lite.data import assets

    cfg = load_config(overrides, config_name)
    problems = normalize(cfg)
    if problems:
        raise ConfigError(problems)
    cfg.actor_rollout_ref.model.path = assets.resolve(cfg.actor_rollout_ref.model.path)
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
    cfg = compose_config(overrides, args.config_name)
    world = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
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
    print("each process's CUDA context and NCCL buffers; host/node: offloaded state while a model loads")
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
