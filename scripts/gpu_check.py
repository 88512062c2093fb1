"""The device check's driver: per model shape and mode, peak device memory next to the planner's
estimate, update throughput, host-link use and pinned host bytes, all from one run.

    python scripts/gpu_check.py                     # GPU: Qwen2.5 0.5B, 1.5B, 7B shapes x every mode
    python scripts/gpu_check.py --models small      # CPU: a 16M-parameter Qwen2 (throughput, traffic)
    python scripts/gpu_check.py --dry               # tiny shapes, one step: checks the script anywhere
    python scripts/gpu_check.py --plan              # the rows an H200 would run, planned, nothing run

Needs torch and transformers (and this repository) only: no pytest, Ray, Hydra or vLLM. Models are
randomly initialised from real config.json files (scripts/model_configs/). Each row runs in a child
process of its own (`--row MODEL:MODE`) under a time limit, so an out-of-memory error, a crash or a
hang is reported in its row and the other rows still run. A row the planner says cannot fit the
device (or the host) is not run and says "does not fit (planner: ...)".

A row trains one FSDP2 engine (world size 1, its own process group): one warm-up PPO update (it
creates the optimizer state), then --steps timed updates of --micro-batches x --micro-size
sequences of --prompt + --response tokens, gradient checkpointing, bf16 compute and fp32 master
weights on a GPU (fp32 throughout on CPU). Columns:

  peak GiB    torch.cuda.max_memory_allocated over the timed updates (no CUDA context)
  plan GiB    the planner's update peak for the same engine (planner/engine_memory.py) and its error
  tok/s       tokens per second of the fastest timed update, and the ratio to no offload
  h2d GiB/s   host-to-device bytes over the seconds they took (manual offload: each copy timed;
              offload_policy: FSDP2's copies are counted, not timed, so bytes over the whole update,
              a lower bound, marked >=), and that as a share of the pinned-copy peak measured first
  pinned GiB  page-locked host bytes: manual offload's HostBuffers plus the caching host allocator's
              peak (offload_policy's rounded blocks, in use or cached), next to the planner's host bytes
  ctx GiB     device memory in use outside torch's allocator after the row (CUDA context, NCCL
              and cuBLAS workspaces) next to the planner's per-process assumption (planner/phases.py)

Rows are the modes of scripts/gpu_check_modes.py; register_mode() there adds one (see Mode): a
lever to switch on, what the planner should assume for it, which models it applies to, an optional
device-memory cap and an optional hook on the built module (e.g. applying adapters). They run in
gpu_check_modes.row_order: the largest model's param+optimizer offload and offload_policy rows first,
each printed as it completes; the whole table (with the ratios to no offload) once more at the end.
A row whose planned host memory exceeds 85% of what is free is not run unless --ignore-host-gate.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # `python scripts/gpu_check.py` from anywhere: this repository's verl_lite
sys.path.insert(0, os.path.join(ROOT, "scripts"))  # its rows, also when loaded by path (the tests)

import torch  # noqa: E402
from gpu_check_modes import MODES, Mode, register_mode, row_order  # noqa: E402, F401  (register_mode: the row API)

from verl_lite.engine.attention import select_attention  # noqa: E402
from verl_lite.engine.model_shape import ModelShape  # noqa: E402
from verl_lite.planner.engine_memory import EngineEstimate, estimate  # noqa: E402
from verl_lite.planner.engine_setup import EngineSetup  # noqa: E402
from verl_lite.planner.phases import PROCESS_OVERHEAD  # noqa: E402
from verl_lite.utils import device as dev  # noqa: E402
from verl_lite.utils.table import Column, Table  # noqa: E402

GB = 1024**3
LINK_TIMEOUT_S = 60.0  # the pinned-copy peak's child: start, CUDA context, 3 x 512 MiB copies
CONFIGS = os.path.join(ROOT, "scripts", "model_configs")
BUILTIN = {  # name -> Qwen2 shape (hidden, layers, vocab, intermediate, heads, kv_heads)
    "tiny": (64, 2, 256, 128, 2, 1),
    "small": (512, 4, 8192, 1536, 8, 2),
}


# --- shapes and data --------------------------------------------------------------------------------
def model_config(name: str):
    from transformers import AutoConfig, Qwen2Config  # here: the parent and --plan build no model

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


# --- the planner's view ------------------------------------------------------------------------------
def plan(shape: ModelShape, mode: Mode, args, gpu: bool | None = None) -> EngineEstimate:
    """The planner's estimate of a row on this machine (`gpu`: on a GPU machine, whatever this is)."""
    gpu = dev.has_accelerator() if gpu is None else gpu
    setup = EngineSetup(
        dense_mask=select_attention(None, accelerator=gpu).dense_mask,  # the engine's kernel there
        world=1,
        mode=mode.plan_mode,
        micro=args.micro_size,
        seq_len=args.prompt + args.response,
        response_len=args.response,
        model_dtype="fp32",
        param_dtype="bf16" if gpu else "fp32",
        reduce_dtype="fp32",
        grad_checkpointing=True,
        pinned_host=gpu,
        **mode.setup,
    )
    return estimate(shape, setup)


def host_available_gb() -> float:
    """MemAvailable from /proc/meminfo (Linux; psutil may be missing on the GPU machine)."""
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024 / GB
    except (OSError, KeyError, ValueError):
        return float("inf")  # unknown: let the row try


def does_not_fit(
    shape: ModelShape,
    mode: Mode,
    est: EngineEstimate,
    device_gb: float,
    host_gb: float,
    gpu: bool | None = None,
    host_gate: bool = True,
) -> str:
    """Why the planner says this row cannot run here ('' when it can). `device_gb` is inf when there is
    no device memory to fill (CPU, unless --device-gb says otherwise); `host_gate=False`
    (--ignore-host-gate) runs a row whatever its planned host memory."""
    gpu = dev.has_accelerator() if gpu is None else gpu
    if mode.memory_cap_gb:
        device_gb = min(device_gb, mode.memory_cap_gb)
    if est.update / GB > 0.95 * device_gb:
        return f"does not fit (planner: {est.update / GB:.1f} GiB > {device_gb:.1f} GiB device)"
    # the model is built on the device on a GPU (then sharded); on CPU a full fp32 copy first
    host = est.host + (0 if gpu else shape.num_params * 4)
    if host_gate and host / GB > 0.85 * host_gb:
        return f"does not fit (planner: {host / GB:.1f} GiB host > 85% of {host_gb:.1f} GiB free)"
    return ""


# --- one row, in a child process ---------------------------------------------------------------------
def build_actor(args, name: str, cfg, mode: Mode):
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoModelForCausalLM

    from tests.helpers.configs import fp32_fsdp, tiny_actor, tiny_model, tiny_optim
    from verl_lite.config.schema import MixedPrecisionConfig
    from verl_lite.engine.fsdp_engine import FSDPEngine
    from verl_lite.workers.actor import PPOActor

    if dev.has_accelerator():  # bf16 compute, fp32 master weights and reductions
        bf16 = MixedPrecisionConfig(param_dtype="bf16", reduce_dtype="fp32", buffer_dtype="fp32")
        fsdp = fp32_fsdp(**{"mixed_precision": bf16, **mode.fsdp})
    else:
        fsdp = fp32_fsdp(**mode.fsdp)
    optim = tiny_optim(lr=1e-6, total_training_steps=args.steps + 1)
    actor_cfg = tiny_actor(
        ppo_micro_batch_size_per_gpu=args.micro_size, fsdp_config=fsdp, optim=optim, **mode.actor
    )
    model_cfg = tiny_model(f"<random {name}>", enable_gradient_checkpointing=True, **mode.model)
    torch.manual_seed(0)
    # A capped row (a smaller card) builds on the host, as a worker loads its model: the fp32 random
    # model alone (30.5 GB at 7B) would pass the cap before sharding put anything where its mode keeps it.
    # The other rows build on the device: a random 7B initialises in seconds there, minutes on the host.
    where = "cpu" if mode.memory_cap_gb else dev.local_device()
    with torch.device(where):
        module = AutoModelForCausalLM.from_config(cfg)
    if mode.prepare is not None:
        module = mode.prepare(module)
    mesh = init_device_mesh(dev.device_type(), (1,))
    engine = FSDPEngine(model_cfg, fsdp, mesh, role="actor", optim_cfg=optim, grad_clip=1.0, module=module)
    return engine, PPOActor(engine, actor_cfg, response_length=args.response, temperature=1.0)


def link_share(moved: dict, seconds: float) -> tuple[float, bool]:
    """(h2d GiB/s, whether it is a lower bound) of one timed update."""
    if moved.get("perf/offload/h2d_gb", 0.0) > 0 and moved.get("timing_s/reload", 0.0) > 0:
        return moved["perf/offload/h2d_gb"] / moved["timing_s/reload"], False
    if moved.get("perf/offload/policy_h2d_gb", 0.0) > 0:
        return moved["perf/offload/policy_h2d_gb"] / seconds, True
    return 0.0, False


def run_row(args, name: str, mode: Mode) -> dict:
    from verl_lite.engine.offload import offload_metrics

    cfg = model_config(name)
    if mode.memory_cap_gb:
        dev.cap_device_memory(mode.memory_cap_gb)
    engine, actor = build_actor(args, name, cfg, mode)
    rows = args.micro_batches * args.micro_size
    batch = make_batch(rows, args.prompt, args.response, cfg.vocab_size, seed=0)
    actor.update(batch, mini_size=rows, micro_size=args.micro_size)  # warm-up: the optimizer state
    engine.pop_metrics()
    dev.synchronize()
    dev.reset_peak_memory()
    dev.reset_peak_pinned_host()
    best, best_moved = float("inf"), {}
    for _ in range(args.steps):  # the fastest update is the least disturbed by other load
        start = time.perf_counter()
        actor.update(batch, mini_size=rows, micro_size=args.micro_size)
        dev.synchronize()
        seconds = time.perf_counter() - start
        moved = offload_metrics({"actor": engine.pop_metrics()[1]})
        if seconds < best:
            best, best_moved = seconds, moved
    gbps, lower_bound = link_share(best_moved, best)
    return {
        "peak_gb": dev.memory_stats_gb().get("max_memory_allocated_gb"),
        "tokens_per_s": rows * (args.prompt + args.response) / best,
        "h2d_gbps": gbps,
        "h2d_lower_bound": lower_bound,
        # manual offload's HostBuffers (registered once, kept) + the caching host allocator's peak
        "pinned_gb": (dev.pinned_host_bytes()["registered"] + dev.pinned_host_peak_bytes()) / GB,
        "outside_gb": dev.memory_outside_torch_gb(),
    }


def init_process_group() -> None:
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dev.set_local_device()
    dist.init_process_group(dev.dist_backend(), rank=0, world_size=1)


def child_main(args) -> int:
    """--row MODEL:MODE or --link: print one JSON line, then exit (the parent reads it)."""
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    if args.link:
        peak = max(dev.measure_link_gbps(512 * 1024**2) for _ in range(3)) if dev.has_accelerator() else 0.0
        print("RESULT " + json.dumps({"link_gbps": peak}), flush=True)
        return 0
    name, mode = args.row.split(":", 1)
    init_process_group()
    print("RESULT " + json.dumps(run_row(args, name, MODES[mode])), flush=True)
    return 0


# --- the parent: every row, the table ----------------------------------------------------------------
def child(args, extra: list[str], timeout_s: float) -> tuple[dict | None, str]:
    """Run this script as a child; (its RESULT, '') or (None, why it gave none)."""
    cmd = [sys.executable, os.path.abspath(__file__), *args.child_argv, *extra]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout_s:.0f} s"
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :]), ""
    text = proc.stdout + proc.stderr
    if "OutOfMemoryError" in text or "out of memory" in text.lower():
        return None, "out of memory"
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return None, f"failed (exit {proc.returncode}): {lines[-1][:120] if lines else 'no output'}"


TABLE = Table(
    Column("model", 14, align="<"),
    Column("params", 9),
    Column("mode", 25, align="<", gap=2),
    Column("peak GiB", 9, ".2f"),
    Column("plan GiB", 9, ".2f"),
    Column("err", 7),
    Column("tok/s", 10, ".0f"),
    Column("/none", 7),
    Column("h2d GiB/s", 11),
    Column("/link", 7),
    Column("pinned GiB", 11, ".2f"),
    Column("plan", 7, ".1f"),
    Column("ctx GiB", 8, ".2f"),
    Column("plan", 6, ".2f"),
)


def row_line(
    name: str, shape: ModelShape, mode: str, est: EngineEstimate, r: dict | None, note: str, base
) -> str:
    label = (name, f"{shape.num_params / 1e6:.1f}M", mode)
    if r is None:
        return TABLE.line(*label, note=note)
    peak, plan_gb = r["peak_gb"], est.update / GB
    err = f"{(plan_gb - peak) / peak:+.0%}" if peak else "n/a"
    ratio = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}" if base else "-"
    gbps = (">" if r["h2d_lower_bound"] else "") + f"{r['h2d_gbps']:.1f}" if r["h2d_gbps"] else "-"
    link = f"{r['h2d_gbps'] / r['link_gbps']:.0%}" if r["h2d_gbps"] and r.get("link_gbps") else "-"
    outside = r.get("outside_gb")
    ctx = (outside, PROCESS_OVERHEAD / GB) if outside is not None else ("n/a", "-")
    measured = (peak if peak is not None else "n/a", plan_gb, err, r["tokens_per_s"], ratio, gbps, link)
    return TABLE.line(*label, *measured, r["pinned_gb"], est.host / GB, *ctx)


TARGETS = {  # issue 12's targets: offload_policy's peak, manual offload's speed, the host link's use
    "policy_peak": 0.5,  # offload_policy peak <= 0.5 x no offload's, same micro-batch
    "manual_speed": 0.7,  # param+optimizer offload tokens/s >= 0.7 x no offload's
    "link_share": 0.7,  # h2d GiB/s during manual offload's copies >= 0.7 x the pinned-copy peak
}


def verdict(model: str, what: str, ratio: float | None, ok: bool, why: str) -> str:
    if ratio is None:
        return f"target {model} {what}: not measured ({why})"
    return f"target {model} {what}: {ratio:.2f} {'met' if ok else 'MISSED'}"


def model_targets(model: str, runs: dict) -> list[str]:
    """`runs[(model, mode)]` is (planner estimate, result or None)."""
    none_est, none = runs.get((model, "none"), (None, None))
    policy = runs.get((model, "offload_policy"), (None, None))[1]
    manual = runs.get((model, "param_optimizer_offload"), (None, None))[1]
    limit = TARGETS["policy_peak"]
    ratio, what, why = (
        None,
        f"offload_policy peak / none <= {limit}",
        "no device peak (CPU) or a row did not run",
    )
    if policy and policy["peak_gb"] and none and none["peak_gb"]:
        ratio = policy["peak_gb"] / none["peak_gb"]
    elif policy and policy["peak_gb"] and none_est is not None:  # none did not fit: the planner's estimate
        ratio, what = policy["peak_gb"] * GB / none_est.update, what + " (none: planner estimate)"
    out = [verdict(model, what, ratio, ratio is not None and ratio <= limit, why)]
    limit = TARGETS["manual_speed"]
    ratio = manual["tokens_per_s"] / none["tokens_per_s"] if manual and none else None
    what = f"param+optimizer offload tok/s / none >= {limit}"
    out.append(verdict(model, what, ratio, ratio is not None and ratio >= limit, "both must run"))
    limit = TARGETS["link_share"]
    ratio = manual["h2d_gbps"] / manual["link_gbps"] if manual and manual.get("link_gbps") else None
    what = f"host link use / pinned-copy peak >= {limit}"
    out.append(
        verdict(
            model,
            what,
            ratio,
            ratio is not None and ratio >= limit,
            "needs the param+optimizer offload row on a GPU",
        )
    )
    return out


def target_lines(runs: dict) -> list[str]:
    """Issue 12's targets per model: the measured ratio, met or MISSED, or why it was not measured."""
    return [line for model in dict.fromkeys(m for m, _ in runs) for line in model_targets(model, runs)]


def run_all(args) -> int:
    started = time.perf_counter()
    gpu = dev.has_accelerator()
    # the pinned-copy peak, in a child of its own like the rows; without a device there is no link
    link, why = child(args, ["--link"], LINK_TIMEOUT_S) if gpu else (None, "no device")
    link_gbps = (link or {}).get("link_gbps", 0.0)
    device_gb = args.device_gb or (dev.device_memory_total_gb() if gpu else float("inf"))
    host_gb = host_available_gb()
    where = f"{dev.device_name()} ({device_gb:.0f} GiB)" if gpu else "cpu (no device memory to measure)"
    print(
        f"gpu_check on {where}; pinned host->device copy peak {f'{link_gbps:.1f} GiB/s' if link else 'not measured'}{' (' + why + ')' if why else ''}; "
        f"{args.micro_batches} micro-batches x {args.micro_size} x {args.prompt}+{args.response} tokens, "
        f"best of {args.steps} update(s) per row after a warm-up",
        flush=True,
    )
    print(TABLE.header(), flush=True)
    failed, runs = 0, {}
    models = [m.strip() for m in args.models.split(",")]
    shapes = {name: shape_of(model_config(name)) for name in models}
    for name, mode in row_order(models):
        shape = shapes[name]
        est = plan(shape, mode, args)
        note = does_not_fit(shape, mode, est, device_gb, host_gb, host_gate=not args.ignore_host_gate)
        result = None
        missing = [m for m in mode.requires if importlib.util.find_spec(m) is None]
        if missing and not note:
            note = f"not run: needs {', '.join(missing)} (pip install {' '.join(missing)})"
        left = args.time_budget_s - (time.perf_counter() - started)
        if not note and left < 10:
            note = "not run: time budget spent"
        if not note:
            result, note = child(args, ["--row", f"{name}:{mode.name}"], min(args.row_timeout_s, left))
            if result is None:
                failed += note != "out of memory"
                note = f"{note} (planner: {est.update / GB:.1f} GiB)"
            else:
                result["link_gbps"] = link_gbps
        runs[name, mode.name] = (est, result, note)
        base = (runs.get((name, "none")) or (None, None))[1]  # when no offload has run already
        print(row_line(name, shape, mode.name, est, result, note, base), flush=True)
    lines = []  # the whole table again, each row against its model's no-offload row
    for (name, mode_name), (est, result, note) in runs.items():
        base = (runs.get((name, "none")) or (None, None))[1]
        lines.append(row_line(name, shapes[name], mode_name, est, result, note, base))
    runs = {key: (est, result) for key, (est, result, _) in runs.items()}
    print("\n" + TABLE.header() + "\n" + "\n".join(lines))
    print("\n".join(target_lines(runs)))
    print(f"gpu_check: {len(lines)} rows, {failed} failed, {time.perf_counter() - started:.0f} s")
    return 1 if failed else 0


def parse_args(argv):
    gpu = dev.has_accelerator()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry", action="store_true", help="tiny shapes, one timed step: checks the script")
    p.add_argument(
        "--models", default=None, help="comma-separated: tiny, small, or names in scripts/model_configs"
    )
    p.add_argument("--micro-batches", type=int, default=4, help="micro-batches per update")
    p.add_argument("--micro-size", type=int, default=2, help="sequences per micro-batch")
    p.add_argument("--prompt", type=int, default=None, help="prompt tokens per sequence")
    p.add_argument("--response", type=int, default=None, help="response tokens per sequence")
    p.add_argument("--steps", type=int, default=None, help="timed updates per row (after one warm-up)")
    p.add_argument("--time-budget-s", type=float, default=420.0, help="rows not started by then are skipped")
    p.add_argument(
        "--device-gb",
        type=float,
        default=None,
        help="plan for a device of this many GiB (default: this one's)",
    )
    p.add_argument("--row-timeout-s", type=float, default=240.0, help="limit of one row")
    p.add_argument(
        "--ignore-host-gate",
        action="store_true",
        help="run rows whose planned host memory exceeds 85%% of what is free (the planner may be wrong)",
    )
    p.add_argument(
        "--plan", action="store_true", help="print the rows an H200 would run, planned; run nothing"
    )
    p.add_argument(
        "--host-gb", type=float, default=None, help="plan for this many GiB of host memory (--plan)"
    )
    p.add_argument("--row", default=None, help=argparse.SUPPRESS)  # child: MODEL:MODE
    p.add_argument("--link", action="store_true", help=argparse.SUPPRESS)  # child: the pinned-copy peak
    args = p.parse_args(argv)
    gpu = gpu or args.plan  # --plan: what a GPU machine would run
    default_models = "tiny" if args.dry else ("qwen2.5-7b,qwen2.5-1.5b,qwen2.5-0.5b" if gpu else "small")
    args.models = args.models or default_models
    args.prompt = args.prompt or (16 if args.dry else 256 if gpu else 64)
    args.response = args.response or (16 if args.dry else 256 if gpu else 64)
    args.steps = args.steps or (1 if args.dry else 3 if gpu else 5)
    args.child_argv = [  # what a child needs to rebuild the same row
        f"--micro-batches={args.micro_batches}",
        f"--micro-size={args.micro_size}",
        f"--prompt={args.prompt}",
        f"--response={args.response}",
        f"--steps={args.steps}",
    ]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.plan:
        from gpu_check_plan import print_plan

        return print_plan(args)
    if args.row or args.link:
        return child_main(args)
    return run_all(args)


if __name__ == "__main__":
    sys.exit(main())
