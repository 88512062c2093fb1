"""The memory planner's command line: `python -m verl_lite.planner [--device-memory-gb 24] key=value ...`.

Takes the same Hydra overrides as `verl_lite.main_ppo`, reads the model's shape from its config.json,
and prints for each offload mode of the actor, memory lever and micro-batch size the estimated bytes
per device in every phase of a step and per node in host memory, then the recommendation
(recommend.py). The plan is for GPUs (pinned host copies, vLLM's sleep mode) unless trainer.device=cpu.
"""

from __future__ import annotations

import argparse
import math
import sys

from verl_lite.config.common import world_size
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.engine.model_shape import read_shape
from verl_lite.errors import one_line
from verl_lite.planner.phases import plan_rollout_group
from verl_lite.planner.recommend import Row, label, plan_rows, recommend
from verl_lite.planner.request import GB, HEADROOM, Request
from verl_lite.planner.role_engines import lora_fields
from verl_lite.utils.table import Column, Table

TABLE_TERMS = ("params", "grads", "grad_accum", "optimizer", "step_temp", "gathered", "activations")


def format_table(rows: list[Row]) -> str:
    """One line per (mode, micro): the actor's main terms, then each phase's total and the peak; MB for
    models too small to show in GB."""
    unit, scale = ("GB", GB) if max(r.estimate.peak for r in rows) >= GB else ("MB", 1024**2)
    phases = list(rows[0].estimate.phases)
    cols = [*TABLE_TERMS, *phases, "peak", "host/node"]
    width = max(12, max(len(c) for c in cols) + 2)
    name = max(24, *(len(label(r.mode, r.levers)) + 2 for r in rows))
    numbers = [Column(c, width, ".3f") for c in cols]
    table = Table(Column("mode+levers", name, align="<"), Column("micro", 6), *numbers, Column("fits", 6))
    lines = [f"estimated {unit} per device (host: per node)", table.header(), table.rule()]
    for r in rows:
        e = r.estimate
        values = [e.engines["actor"].terms[t] for t in TABLE_TERMS]
        values += [e.phases[p] for p in phases] + [e.peak, r.host_per_node]
        scaled = [v / scale for v in values]
        lines.append(
            table.line(label(r.mode, r.levers), r.micro or "dyn", *scaled, "yes" if r.fits else "no")
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
    parser = argparse.ArgumentParser(prog="python -m verl_lite.planner", description=__doc__.split("\n\n")[0])
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
        for flag in ("device_memory_gb", "host_memory_gb"):
            value = getattr(args, flag)
            if value is not None and not (math.isfinite(value) and value > 0):  # nan passes `<= 0`
                raise ValueError(
                    f"--{flag.replace('_', '-')}={value:g} must be a finite number of GB > 0 (e.g. 24)"
                )
        return _plan(args, overrides)
    except ValueError as e:  # a bad override, model folder or size: one line, as main_ppo says it
        print(f"python -m verl_lite.planner: {one_line(e)}", file=sys.stderr)
        return 2


def _plan(args, overrides: list[str]) -> int:
    cfg = compose_config(overrides, args.config_name)
    world = world_size(cfg)
    budget, host_budget = args.device_memory_gb, args.host_memory_gb
    if budget is None:
        from verl_lite.utils import device as dev

        budget = dev.device_memory_total_gb()
        print(f"--device-memory-gb not given: planning for this machine's {budget:.2f} GB")
    req = Request(cfg, read_shape(cfg.actor_rollout_ref.model.path), world, budget, host_budget)
    shape = req.shape
    count = f"{shape.num_params / 1e9:.3f}B" if shape.num_params >= 1e9 else f"{shape.num_params / 1e6:.3f}M"
    print(
        f"model {cfg.actor_rollout_ref.model.path}: {count} params "
        f"(hidden {shape.hidden}, layers {shape.layers}, vocab {shape.vocab}, intermediate "
        f"{shape.intermediate}, heads {shape.heads}/{shape.kv_heads}); {world} devices of {budget:.2f} GB, "
        f"host {'unchecked' if host_budget is None else f'{host_budget:.1f} GB per node'}; "
        f"planned for {'GPUs' if req.accelerator else 'CPUs'}"
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
    print(format_table(plan_rows(req)))
    group = plan_rollout_group(req)
    if group is not None:  # separate_async: the rollout's own devices
        fits = group.peak <= HEADROOM * req.device_bytes
        print(
            f"separate_async's rollout group: {group.devices} device(s) of {budget:.2f} GB, "
            f"{cfg.actor_rollout_ref.rollout.name} only: {group.generate / GB:.3f} GB while generating, "
            f"{group.sync / GB:.3f} GB while loading weights; host {group.host_per_rank / GB:.3f} GB per "
            f"rank for the weights in transit; fits: {'yes' if fits else 'no'}"
        )
    try:
        rec = recommend(req)
    except ValueError as e:
        print(f"recommendation: none -- {e}")
        return 1
    print(f"recommendation: {rec.reason}")
    print("overrides: " + " ".join(f"actor_rollout_ref.{k}={v}" for k, v in rec.overrides.items()))
    return 0
