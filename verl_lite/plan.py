"""The memory planner: `python -m verl_lite.plan [--device-memory-gb 24] key=value ...`.

Takes the same Hydra overrides as `verl_lite.main_ppo`, reads the model's shape from its
config.json, and prints for each offload mode (none, param+optimizer offload, offload_policy) and
micro-batch size the estimated per-device bytes (engine/memory_model.py), then recommends the
cheapest mode that fits with the largest micro-batch that fits. Cheapest means fewest host copies:
no offload, then manual param+optimizer offload (copies at phase boundaries), then offload_policy
(copies every layer, every micro-batch, and steps on the host).

A configuration fits when its peak is at most HEADROOM of the device's memory: the allocator's
fragmentation and the CUDA context are not modelled. With `trainer.auto_offload=True` the trainer
calls `recommend` at start-up with the memory the workers report and applies the result.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass

from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.engine.memory_model import MODES, Estimate, ModelShape, Setup, estimate, read_shape
from verl_lite.rollout import resolve_rollout_name

GB = 1024**3
HEADROOM = 0.9  # the top of the healthy memory range (trainer/health.py)
log = logging.getLogger(__name__)


@dataclass
class Row:
    mode: str
    micro: int
    estimate: Estimate
    fits: bool


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


def _rollout_during_update(rollout: str, free_cache_engine: bool) -> str:
    """HF keeps its weight copy on the device; vLLM sleeps before the update with free_cache_engine
    (on GPU, where sleep mode exists), otherwise its weights and preallocated KV cache stay."""
    if rollout == "hf":
        return "weights"
    return "none" if free_cache_engine else "weights_and_kv"


def build_setup(cfg: PPOTrainerConfig, world: int, mode: str, micro: int) -> Setup:
    arr = cfg.actor_rollout_ref
    a, fsdp, r = arr.actor, arr.actor.fsdp_config, arr.rollout
    response = r.response_length or cfg.data.max_response_length
    ref = arr.ref.fsdp_config
    rollout = resolve_rollout_name(r.name)
    return Setup(
        world=world,
        mode=mode,
        micro=micro,
        seq_len=cfg.data.max_prompt_length + response,
        response_len=response,
        model_dtype=fsdp.model_dtype,
        param_dtype=fsdp.mixed_precision.param_dtype,
        grad_checkpointing=arr.model.enable_gradient_checkpointing,
        reshard_after_forward=fsdp.reshard_after_forward,
        reduce_every_micro=fsdp.reduce_scatter_every_micro_batch,
        tokens_per_micro=a.ppo_max_token_len_per_gpu if a.use_dynamic_bsz else None,
        rollout_dtype=r.dtype,
        rollout_tp=r.tensor_model_parallel_size if rollout == "vllm" else 1,
        rollout_during_update=_rollout_during_update(rollout, r.free_cache_engine),
        rollout_sequences=max(1, cfg.data.train_batch_size * r.n // world),
        ref_on_device=(not (ref.param_offload or ref.offload_policy)) if a.use_kl_loss else None,
    )


def plan_rows(cfg: PPOTrainerConfig, shape: ModelShape, world: int, budget_gb: float) -> list[Row]:
    micros = [0] if cfg.actor_rollout_ref.actor.use_dynamic_bsz else micro_candidates(cfg, world)
    rows = []
    for mode in MODES:
        for micro in micros:
            est = estimate(shape, build_setup(cfg, world, mode, micro))
            rows.append(Row(mode, micro, est, est.peak <= HEADROOM * budget_gb * GB))
    return rows


def recommend(cfg: PPOTrainerConfig, shape: ModelShape, world: int, budget_gb: float) -> Recommendation:
    """The cheapest mode that fits, with its largest fitting micro-batch; ValueError if none fits."""
    rows = plan_rows(cfg, shape, world, budget_gb)
    for mode in MODES:
        fitting = [r for r in rows if r.mode == mode and r.fits]
        if not fitting:
            continue
        best = max(fitting, key=lambda r: r.micro)
        overrides = {
            "actor.fsdp_config.offload_policy": mode == "offload_policy",
            "actor.fsdp_config.param_offload": mode == "param_optimizer_offload",
            "actor.fsdp_config.optimizer_offload": mode == "param_optimizer_offload",
        }
        if mode != "offload_policy":
            overrides["actor.fsdp_config.gradient_offload"] = False
        if best.micro:
            overrides["actor.ppo_micro_batch_size_per_gpu"] = best.micro
        cheaper = [m for m in MODES[: MODES.index(mode)]]
        why = (
            f"{', '.join(cheaper)} do{'es' if len(cheaper) == 1 else ''} not fit even at the smallest micro-batch; "
            if cheaper
            else ""
        )
        reason = (
            f"{why}{mode} with micro-batch {best.micro or 'dynamic'} peaks at "
            f"{best.estimate.peak / GB:.2f} GB of {budget_gb:.2f} GB ({HEADROOM:.0%} headroom: "
            f"{HEADROOM * budget_gb:.2f} GB) on each of {world} devices"
        )
        return Recommendation(mode, best.micro, overrides, reason)
    smallest = min(rows, key=lambda r: r.estimate.peak)
    raise ValueError(
        f"no offload mode fits {budget_gb:.2f} GB per device: the smallest estimate is "
        f"{smallest.estimate.peak / GB:.2f} GB ({smallest.mode}, micro-batch {smallest.micro or 'dynamic'}); "
        "add devices (trainer.n_gpus_per_node), shorten data.max_prompt_length / max_response_length, "
        "enable actor_rollout_ref.model.enable_gradient_checkpointing, use mixed_precision.param_dtype=bf16, "
        "or set trainer.auto_offload=False to try anyway"
    )


def auto_offload(cfg: PPOTrainerConfig, reported_gb: list[float]) -> tuple[dict[str, object], str]:
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
        rec = recommend(cfg, shape, world, budget)
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


def format_table(rows: list[Row]) -> str:
    """One line per (mode, micro); MB for models too small to show in GB."""
    unit, scale = ("GB", GB) if max(r.estimate.peak for r in rows) >= GB else ("MB", 1024**2)
    cols = [
        "params",
        "grads",
        "optimizer",
        "gathered",
        "activations",
        "rollout",
        "ref",
        "update",
        "between",
        "host",
    ]
    head = f"{'mode':<24}{'micro':>6}" + "".join(f"{c:>12}" for c in cols) + f"{'fits':>6}"
    lines = [f"estimated {unit} per device", head, "-" * len(head)]
    for r in rows:
        e = r.estimate
        values = [
            e.params,
            e.grads,
            e.optimizer,
            e.gathered,
            e.activations,
            e.rollout,
            e.ref,
            e.update,
            e.between,
            e.host,
        ]
        lines.append(
            f"{r.mode:<24}{r.micro or 'dyn':>6}"
            + "".join(f"{v / scale:>12.3f}" for v in values)
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
    args, overrides = parser.parse_known_args(argv)
    cfg = compose_config(overrides, args.config_name)
    world = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    budget = args.device_memory_gb
    if budget is None:
        from verl_lite.utils import device as dev

        budget = dev.device_memory_total_gb()
        print(f"--device-memory-gb not given: planning for this machine's {budget:.2f} GB")
    shape = read_shape(cfg.actor_rollout_ref.model.path)
    count = f"{shape.num_params / 1e9:.3f}B" if shape.num_params >= 1e9 else f"{shape.num_params / 1e6:.3f}M"
    print(
        f"model {cfg.actor_rollout_ref.model.path}: {count} params "
        f"(hidden {shape.hidden}, layers {shape.layers}, vocab {shape.vocab}, intermediate "
        f"{shape.intermediate}, heads {shape.heads}/{shape.kv_heads}); {world} devices of {budget:.2f} GB"
    )
    print("update: peak of the update phase; between: resident while the rollout generates; host: offloaded")
    print(format_table(plan_rows(cfg, shape, world, budget)))
    try:
        rec = recommend(cfg, shape, world, budget)
    except ValueError as e:
        print(f"recommendation: none -- {e}")
        return 1
    print(f"recommendation: {rec.reason}")
    print("overrides: " + " ".join(f"actor_rollout_ref.{k}={v}" for k, v in rec.overrides.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
