"""LoRA vs full fine-tuning on the same model, measured in one run: what LoRA saves and what it costs.

    python scripts/bench_lora.py                         # CPU: a 17M-param Qwen2 ('small'), fp32
    python scripts/bench_lora.py --models qwen2.5-0.5b   # GPU: a random Qwen2.5-0.5B shape, bf16 compute
    python scripts/bench_lora.py --dry                   # tiny shapes, one step: checks the script

Each variant -- full fine-tuning, then LoRA (rank --rank on all linear layers, alpha 2 x rank) --
runs in a fresh process, so its peak memory is its own. A variant builds the FSDP2 actor engine
(world 1, the offload mode of --mode) on a randomly initialised model of the named shape, runs one
warm-up PPO update (it creates the optimizer state) and --steps timed updates, then reports:
  - bytes of trainable parameters, of the optimizer state (AdamW's tensors, counted) and of the
    gradients present when the optimizer steps (counted in a step pre-hook);
  - peak memory: the device's max_memory_allocated on a GPU; on a CPU the process's peak resident
    memory above what it held before the model was built (the interpreter and torch's own);
  - the fastest update (the least disturbed by other load on a shared machine);
  - the bytes one weight sync hands the rollout after an update, through the real sync strategy
    (rollout/weight_sync.py) into a real HF rollout: every weight (FullSync) or the adapter only
    (AdapterSync). Skipped with --no-sync (the rollout's own copy would not fit a capped device).
The last lines are LoRA's ratios to full fine-tuning. Timings on a shared machine are noisy: compare
ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

GB = 1024**3
VARIANTS = ("full", "lora")
OFFLOAD = {
    "none": {},
    "param_optimizer_offload": {"param_offload": True, "optimizer_offload": True},
    "offload_policy": {"offload_policy": True},
}


def _tensor_bytes(tensors) -> int:
    from torch.distributed.tensor import DTensor

    total = 0
    for t in tensors:
        local = t.to_local() if isinstance(t, DTensor) else t
        total += local.numel() * local.element_size()
    return total


def _rss_peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GB  # Linux: KiB


def _build_engine(args, variant: str, module, path: str):
    from torch.distributed.device_mesh import init_device_mesh

    from verl_lite.config.schema import (
        ActorConfig,
        FSDPConfig,
        MixedPrecisionConfig,
        OptimConfig,
    )
    from verl_lite.engine.fsdp_engine import FSDPEngine
    from verl_lite.utils import device as dev

    compute = "bf16" if dev.is_cuda_available() else "fp32"
    model_cfg = engine_model_cfg(args, variant, path, grad_ckpt=True)
    mp = MixedPrecisionConfig(param_dtype=compute, reduce_dtype="fp32", buffer_dtype="fp32")
    fsdp = FSDPConfig(mixed_precision=mp, model_dtype="fp32", **OFFLOAD[args.mode])
    optim = OptimConfig(lr=1e-5, total_training_steps=args.steps + 1)
    actor_cfg = ActorConfig(
        ppo_micro_batch_size_per_gpu=args.micro_size, grad_clip=1.0, optim=optim, fsdp_config=fsdp
    )
    mesh = init_device_mesh(dev.device_type(), (1,))
    engine = FSDPEngine(model_cfg, fsdp, mesh, role="actor", optim_cfg=optim, grad_clip=1.0, module=module)
    return engine, actor_cfg


def engine_model_cfg(args, variant: str, path: str, grad_ckpt: bool):
    """The model section of a variant: LoRA rank --rank, alpha 2 x rank, all linear layers."""
    from verl_lite.config.schema import ModelConfig

    lora = {"lora_rank": args.rank, "lora_alpha": 2 * args.rank} if variant == "lora" else {}
    return ModelConfig(
        path=path,
        enable_gradient_checkpointing=grad_ckpt,
        use_remove_padding=False,
        target_modules="all-linear",
        **lora,
    )


def run_variant(args, variant: str) -> dict:
    """One variant in this (fresh) process; returns its measurements."""
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpu_check

    from verl_lite.utils import device as dev
    from verl_lite.workers.actor import PPOActor

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    gpu_check.init_process_group()
    if args.cap_gb and dev.is_cuda_available():
        total = torch.cuda.get_device_properties(0).total_memory / GB
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.cap_gb / total))
    cfg = gpu_check.model_config(args.model)
    rss_before = _rss_peak_gb()
    torch.manual_seed(0)
    with torch.device(dev.local_device()):
        module = AutoModelForCausalLM.from_config(cfg)
    folder = None
    if not args.no_sync:  # the HF rollout loads the same weights from a folder, as in a run
        folder = tempfile.mkdtemp(prefix="bench_lora_")
        module.save_pretrained(folder)
    engine, actor_cfg = _build_engine(args, variant, module, folder or f"<random {args.model}>")
    del module
    grad_bytes = []
    engine.optimizer.register_step_pre_hook(
        lambda opt, *_: grad_bytes.append(
            _tensor_bytes(p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None)
        )
    )
    actor = PPOActor(engine, actor_cfg, response_length=args.response, temperature=1.0)
    rows = args.micro_batches * args.micro_size
    batch = gpu_check.make_batch(rows, args.prompt, args.response, cfg.vocab_size, seed=0)
    actor.update(batch, mini_size=rows, micro_size=args.micro_size)  # warm-up: optimizer state
    dev.synchronize()
    dev.reset_peak_memory()
    seconds = []
    for _ in range(args.steps):
        start = time.perf_counter()
        actor.update(batch, mini_size=rows, micro_size=args.micro_size)
        dev.synchronize()
        seconds.append(time.perf_counter() - start)
    out = {
        "params": engine.num_params(),
        "trainable_bytes": _tensor_bytes(p for p in engine.module.parameters() if p.requires_grad),
        "optimizer_bytes": _tensor_bytes(
            v
            for s in engine.optimizer.state.values()
            for v in s.values()
            if torch.is_tensor(v) and v.dim() > 0
        ),
        "grad_bytes": max(grad_bytes),
        "update_s": min(seconds),
        "peak_gb": dev.memory_stats_gb().get("max_memory_allocated_gb", _rss_peak_gb() - rss_before),
    }
    if folder is not None:
        out["sync_bytes"] = _sync_bytes(args, variant, engine, folder)
    dist.destroy_process_group()
    return out


def _sync_bytes(args, variant: str, engine, folder: str) -> int:
    """Bytes a sync after an update hands the rollout. The base weights, where the rollout starts
    without them (vLLM's load_format=dummy), move once per run and are not counted here."""
    from verl_lite.config.schema import RolloutConfig
    from verl_lite.data.tiny_tokenizer import build_tokenizer
    from verl_lite.rollout.hf_rollout import HFRollout
    from verl_lite.rollout.weight_sync import build_weight_sync

    model_cfg = engine_model_cfg(args, variant, folder, grad_ckpt=False)
    rollout = HFRollout(model_cfg, RolloutConfig(dtype="fp32", seed=0), build_tokenizer(), rank=0)
    return round(build_weight_sync(engine, rollout)()["update_weights_gb"] * GB)


def child(args) -> int:
    print(json.dumps(run_variant(args, args.child)), flush=True)
    return 0


def spawn(args, variant: str) -> dict:
    """run_variant in a fresh interpreter: its peak memory is its own."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", variant, *args.passthrough]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s)
    if done.returncode != 0:
        raise SystemExit(f"bench_lora: the {variant} run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


ROWS = (  # (label, key, unit divisor, format)
    ("trainable params GB", "trainable_bytes", GB, ".4f"),
    ("optimizer state GB", "optimizer_bytes", GB, ".4f"),
    ("gradients GB", "grad_bytes", GB, ".4f"),
    ("peak memory GB", "peak_gb", 1, ".3f"),
    ("fastest update s", "update_s", 1, ".3f"),
    ("weight sync GB", "sync_bytes", GB, ".4f"),
)


def report(args, results: dict) -> None:
    from verl_lite.utils.table import Column, Table

    where = "device max_memory_allocated" if args.gpu else "process peak RSS above start-up"
    full, lora = results["full"], results["lora"]
    print(
        f"bench_lora: {args.model} ({full['params'] / 1e6:.1f}M params), LoRA rank {args.rank} all-linear, "
        f"offload {args.mode}, {args.micro_batches} x {args.micro_size} x {args.prompt}+{args.response} "
        f"tokens, best of {args.steps} update(s); peak = {where}"
    )
    table = Table(Column("", 22, align="<"), Column("full", 12), Column("lora", 12), Column("lora/full", 12))
    print(table.header())
    for label, key, unit, fmt in ROWS:
        if key not in full:
            continue
        a, b = full[key] / unit, lora[key] / unit
        print(table.line(label, f"{a:{fmt}}", f"{b:{fmt}}", f"{b / a:.4f}" if a else "-"))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry", action="store_true", help="tiny shapes, one timed step: checks the script")
    p.add_argument("--models", default=None, help="tiny, small or a name in scripts/model_configs")
    p.add_argument("--rank", type=int, default=8, help="LoRA rank (alpha is twice it)")
    p.add_argument("--mode", default="none", choices=sorted(OFFLOAD), help="offload mode of both variants")
    p.add_argument("--only", default=None, choices=VARIANTS, help="run one variant (e.g. the capped GPU row)")
    p.add_argument("--cap-gb", type=float, default=None, help="GPU: cap this process's device memory")
    p.add_argument("--no-sync", action="store_true", help="skip the weight-sync measurement")
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--micro-size", type=int, default=2)
    p.add_argument("--prompt", type=int, default=None)
    p.add_argument("--response", type=int, default=None)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--timeout-s", type=float, default=600.0, help="per variant")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    import torch

    args.gpu = torch.cuda.is_available()
    args.model = args.models or ("tiny" if args.dry else "qwen2.5-0.5b" if args.gpu else "small")
    args.prompt = args.prompt or (16 if args.dry else 256 if args.gpu else 64)
    args.response = args.response or (16 if args.dry else 256 if args.gpu else 64)
    args.steps = args.steps or (1 if args.dry else 3)
    args.passthrough = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--dry"] + [
        f"--models={args.model}",
        f"--prompt={args.prompt}",
        f"--response={args.response}",
        f"--steps={args.steps}",
    ]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        return child(args)
    results = {v: spawn(args, v) for v in ([args.only] if args.only else VARIANTS)}
    if args.only:
        print(
            f"bench_lora: {args.only} on {args.model} with offload {args.mode}: {json.dumps(results[args.only])}"
        )
    else:
        report(args, results)
    print("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
