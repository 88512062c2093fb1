"""Offload cost, measured: peak device memory and update throughput per offload mode, from one run.

    python scripts/bench_offload.py                       # GPU: Qwen2.5 0.5B, 1.5B, 7B shapes
    python scripts/bench_offload.py --models small        # CPU: a 17M-param Qwen2
    python scripts/bench_offload.py --dry                 # tiny shapes, one step: checks the script

For each model (randomly initialised from a real config.json in scripts/model_configs/, or a
built-in small shape) and each mode -- no offload, param+optimizer offload, offload_policy -- it
builds the FSDP2 engine in this one process (world size 1; it opens its own process group: no Ray,
no Hydra), runs one warm-up update (which creates the optimizer state) and then `--steps` timed PPO
updates of `--micro-batches` micro-batches each, and prints peak device memory (with the planner's
estimate beside it), update tokens/s of the fastest update (the least disturbed by other load),
host<->device traffic per update, and each mode's ratios against no offload. A mode the planner says cannot fit the device (or the host) is skipped and
says so. Throughput on a shared machine is noisy: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

import torch
import torch.distributed as dist
from transformers import AutoConfig, AutoModelForCausalLM, Qwen2Config

from verl_lite.config.schema import ActorConfig, FSDPConfig, MixedPrecisionConfig, ModelConfig, OptimConfig
from verl_lite.engine.fsdp_engine import FSDPEngine
from verl_lite.engine.memory_model import EngineSetup, ModelShape, estimate
from verl_lite.engine.mesh import build_layout
from verl_lite.engine.offload import offload_metrics
from verl_lite.utils import device as dev
from verl_lite.workers.actor import PPOActor

GB = 1024**3
CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_configs")
BUILTIN = {  # name -> Qwen2 shape (hidden, layers, vocab, intermediate, heads, kv_heads)
    "tiny": (64, 2, 256, 128, 2, 1),
    "small": (512, 4, 8192, 1536, 8, 2),
}
MODES = {
    "none": {},
    "param_optimizer_offload": {"param_offload": True, "optimizer_offload": True},
    "offload_policy": {"offload_policy": True},
}


def model_config(name: str):
    if name in BUILTIN:
        h, layers, vocab, inter, heads, kv = BUILTIN[name]
        return Qwen2Config(
            hidden_size=h,
            num_hidden_layers=layers,
            vocab_size=vocab,
            intermediate_size=inter,
            num_attention_heads=heads,
            num_key_value_heads=kv,
            tie_word_embeddings=True,
            max_position_embeddings=4096,
        )
    path = os.path.join(CONFIGS, name)
    if not os.path.isfile(os.path.join(path, "config.json")):
        choices = sorted(BUILTIN) + sorted(os.listdir(CONFIGS))
        raise SystemExit(f"--models: unknown model {name!r}; choose from {choices}")
    return AutoConfig.from_pretrained(path)


def shape_of(cfg) -> ModelShape:
    return ModelShape(
        hidden=cfg.hidden_size,
        layers=cfg.num_hidden_layers,
        vocab=cfg.vocab_size,
        intermediate=cfg.intermediate_size,
        heads=cfg.num_attention_heads,
        kv_heads=cfg.num_key_value_heads,
        tie_word_embeddings=bool(cfg.tie_word_embeddings),
    )


def make_batch(rows: int, prompt: int, response: int, vocab: int, seed: int) -> dict[str, torch.Tensor]:
    """Full-length sequences (every token real), PPO fields as the actor expects them."""
    g = torch.Generator().manual_seed(seed)
    seq = prompt + response
    input_ids = torch.randint(3, vocab, (rows, seq), generator=g)
    return {
        "input_ids": input_ids,
        "attention_mask": torch.ones(rows, seq, dtype=torch.long),
        "position_ids": torch.arange(seq).expand(rows, seq).clone(),
        "responses": input_ids[:, prompt:].clone(),
        "response_mask": torch.ones(rows, response, dtype=torch.long),
        "advantages": torch.randn(rows, response, generator=g),
        "old_log_probs": -torch.rand(rows, response, generator=g) * 3,
    }


def host_available_gb() -> float:
    """MemAvailable from /proc/meminfo (Linux; psutil may be missing on the GPU machine)."""
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024 / GB
    except (OSError, KeyError, ValueError):
        return float("inf")  # unknown: let the run try


def fits(shape: ModelShape, setup: EngineSetup) -> tuple[bool, str, float]:
    """The planner's verdict for the device and the host, and its device estimate in GB."""
    est = estimate(shape, setup)
    device_gb = dev.device_memory_total_gb() if dev.is_cuda_available() else float("inf")
    host_gb = host_available_gb()
    if est.update / GB > 0.95 * device_gb:
        return False, f"estimate {est.update / GB:.1f} GB > device {device_gb:.1f} GB", est.update / GB
    # building the model needs a full fp32 copy on the host (CPU) or the device (GPU) first
    host_need = est.host + (shape.num_params * 4 if not dev.is_cuda_available() else 0)
    if host_need / GB > 0.8 * host_gb:
        return (
            False,
            f"host needs {host_need / GB:.1f} GB > 80% of {host_gb:.1f} GB available",
            est.update / GB,
        )
    return True, "", est.update / GB


def run_mode(args, name: str, cfg, mode: str, batch: dict) -> dict:
    gpu = dev.is_cuda_available()
    mp = MixedPrecisionConfig(param_dtype="bf16" if gpu else "fp32")
    fsdp = FSDPConfig(mixed_precision=mp, **MODES[mode])
    actor_cfg = ActorConfig(ppo_micro_batch_size_per_gpu=args.micro_size, grad_clip=1.0)
    actor_cfg.clip_ratio_low = actor_cfg.clip_ratio_high = 0.2
    actor_cfg.optim = OptimConfig(lr=1e-6, total_training_steps=args.steps + 1)
    torch.manual_seed(0)
    with torch.device(dev.local_device()):
        module = AutoModelForCausalLM.from_config(cfg)
    mesh = build_layout(dev.device_type())
    engine = FSDPEngine(
        ModelConfig(path=f"<random {name}>", enable_gradient_checkpointing=True, use_remove_padding=False),
        fsdp,
        mesh,
        role="actor",
        optim_cfg=actor_cfg.optim,
        grad_clip=1.0,
        module=module,
    )
    del module
    actor = PPOActor(engine, actor_cfg, response_length=args.response, temperature=1.0)
    rows = batch["input_ids"].shape[0]
    actor.update(batch, mini_size=rows, micro_size=args.micro_size)  # warm-up: optimizer state
    engine.pop_metrics()
    dev.synchronize()
    dev.reset_peak_memory()
    seconds = []  # per update: the fastest is the least disturbed by other load on a shared machine
    for _ in range(args.steps):
        start = time.perf_counter()
        actor.update(batch, mini_size=rows, micro_size=args.micro_size)
        dev.synchronize()
        seconds.append(time.perf_counter() - start)
    _, transfers = engine.pop_metrics()
    moved = offload_metrics({"actor": transfers})
    h2d = moved.get("perf/offload/h2d_gb", 0.0) + moved.get("perf/offload/policy_h2d_gb", 0.0)
    peak = dev.memory_stats_gb().get("max_memory_allocated_gb")
    del actor, engine
    gc.collect()
    dev.empty_cache()
    tokens = rows * (args.prompt + args.response)
    return {"peak_gb": peak, "tokens_per_s": tokens / min(seconds), "h2d_gb": h2d / args.steps}


def bench_model(args, name: str) -> list[str]:
    cfg = model_config(name)
    shape = shape_of(cfg)
    rows = args.micro_batches * args.micro_size
    batch = make_batch(rows, args.prompt, args.response, cfg.vocab_size, seed=0)
    lines, base = [], None
    for mode in MODES:
        setup = EngineSetup(
            world=1,
            mode=mode,
            micro=args.micro_size,
            seq_len=args.prompt + args.response,
            response_len=args.response,
            param_dtype="bf16" if dev.is_cuda_available() else "fp32",
            grad_checkpointing=True,
            pinned_host=dev.is_cuda_available(),
        )
        ok, why, est_gb = fits(shape, setup)
        label = f"{name:<14}{shape.num_params / 1e6:>9.1f}M  {mode:<24}"
        if not ok or time.perf_counter() - args.started > args.time_budget_s:
            lines.append(f"{label}skipped: {why or 'time budget spent'}")
            print(lines[-1], flush=True)
            continue
        try:
            r = run_mode(args, name, cfg, mode, batch)
        except torch.OutOfMemoryError as e:  # the estimate was too optimistic: say so, keep going
            r = str(e).splitlines()[0][:80]
        gc.collect()
        dev.empty_cache()
        if isinstance(r, str):
            lines.append(f"{label}out of memory (estimate {est_gb:.1f} GB): {r}")
            print(lines[-1], flush=True)
            continue
        base = base or (r if mode == "none" else None)
        peak = f"{r['peak_gb']:.2f}" if r["peak_gb"] is not None else "n/a"
        ratio_tps = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}" if base else "-"
        ratio_mem = (
            f"{r['peak_gb'] / base['peak_gb']:.2f}" if base and r["peak_gb"] and base["peak_gb"] else "-"
        )
        lines.append(
            f"{label}{peak:>9}{est_gb:>9.2f}{r['tokens_per_s']:>12.0f}{r['h2d_gb']:>10.3f}{ratio_mem:>10}{ratio_tps:>10}"
        )
        print(lines[-1], flush=True)
    return lines


def init_process_group() -> None:
    if dist.is_initialized():
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dev.set_local_device()
    dist.init_process_group(dev.dist_backend(), rank=0, world_size=1)


def parse_args(argv):
    gpu = dev.is_cuda_available()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--dry", action="store_true", help="tiny shapes, one timed step: checks the script in seconds"
    )
    p.add_argument(
        "--models", default=None, help="comma-separated: tiny, small, or names in scripts/model_configs"
    )
    p.add_argument("--micro-batches", type=int, default=4, help="micro-batches per update")
    p.add_argument("--micro-size", type=int, default=2, help="sequences per micro-batch")
    p.add_argument("--prompt", type=int, default=None, help="prompt tokens per sequence")
    p.add_argument("--response", type=int, default=None, help="response tokens per sequence")
    p.add_argument("--steps", type=int, default=None, help="timed updates per mode (after one warm-up)")
    p.add_argument("--time-budget-s", type=float, default=360.0, help="skip the modes left after this long")
    args = p.parse_args(argv)
    default_models = "tiny" if args.dry else ("qwen2.5-0.5b,qwen2.5-1.5b,qwen2.5-7b" if gpu else "small")
    args.models = args.models or default_models
    args.prompt = args.prompt or (16 if args.dry else 256 if gpu else 64)
    args.response = args.response or (16 if args.dry else 256 if gpu else 64)
    args.steps = args.steps or (1 if args.dry else 3 if gpu else 5)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    args.started = time.perf_counter()
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    init_process_group()
    where = (
        f"cuda ({torch.cuda.get_device_name()})"
        if dev.is_cuda_available()
        else "cpu (fp32; no device memory to measure)"
    )
    print(
        f"bench_offload on {where}: {args.micro_batches} micro-batches x {args.micro_size} sequences x "
        f"{args.prompt}+{args.response} tokens, best of {args.steps} timed update(s) per mode, gradient checkpointing"
    )
    print(
        f"{'model':<14}{'params':>10}  {'mode':<24}{'peak GB':>9}{'est GB':>9}{'tokens/s':>12}{'h2d GB':>10}"
        f"{'mem/none':>10}{'tps/none':>10}"
    )
    try:
        for name in args.models.split(","):
            bench_model(args, name.strip())
    finally:
        dist.destroy_process_group()
    print("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
