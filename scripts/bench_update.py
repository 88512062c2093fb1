"""The GRPO update alone, verl_lite against TRL, on the same tokens: seconds per update and where
they go (torch profiler, per op).

    flock /tmp/verl_lite_cpu.lock python scripts/bench_update.py                       # 21m, L=110
    python scripts/bench_update.py --model 20m --response-length 128 --repeats 3 --profile

scripts/bench_vs_trl.py times whole training runs; this script isolates the update so that the two
sides' forward, backward, clip and optimizer step can be compared op by op. One batch is sampled
once (P arithmetic prompts x G samples, HF `generate` at temperature 1 from the model folder, up to
--response-length tokens, stopping at EOS) and both sides train on exactly these tokens with
random group-normalised advantages (values do not change the cost):
  trl   TRL's GRPOTrainer (bench_vs_trl's config, scripts/bench_trl_side.py) in TRL's own venv:
        `training_step` (its fused-head forward, loss, backward) + clip + optimizer step + scheduler
        step + zero_grad, what HF's Trainer runs per optimizer step;
  verl  verl_lite's actor as a worker builds it (bench_vs_trl's overrides, 1-rank gloo FSDP2):
        `PPOActor.update_own_first`, the call `update_actor` makes when nothing needs old log-probs.
  vllm  the same as verl, with the vLLM rollout built in the process first (as in a vLLM worker).
Each side runs in a fresh process per repeat (sides interleaved), one thread: --warmup updates,
then --updates timed ones (median per process). --profile adds one profiled update per process
and prints its op table (self CPU time, the top --top ops) beside the total.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
HERE = os.path.dirname(os.path.abspath(__file__))
MAX_PROMPT = 16
ROLLOUT_OF_SIDE = {"verl": None, "hf": "hf", "vllm": "vllm"}  # verl_lite's sides: the rollout in the loop


# --- the batch (project venv) --------------------------------------------------------------------
def sample_batch(model: str, prompts: int, samples: int, length: int, seed: int) -> dict:
    """P prompts x G sampled completions (lists of ids) and group-std advantages."""
    import pandas as pd
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from verl_lite.data import assets
    from verl_lite.utils.hf_model import load_tokenizer

    torch.manual_seed(seed)
    tokenizer = load_tokenizer(model)
    frame = pd.read_parquet(assets.resolve("verl_lite://arith/train.parquet")).head(prompts)
    ids = [
        tokenizer.apply_chat_template(
            [dict(m) for m in row.prompt], add_generation_prompt=True, tokenize=True
        )
        for row in frame.itertuples()
    ]
    ids = [list(x["input_ids"]) if isinstance(x, dict) or hasattr(x, "keys") else list(x) for x in ids]
    if max(len(x) for x in ids) > MAX_PROMPT:
        raise ValueError(f"a prompt is longer than {MAX_PROMPT} tokens")
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (MAX_PROMPT - len(x)) + x for x in ids])
    mask = (input_ids != pad).long()
    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    config = GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=length,
        num_return_sequences=samples,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=pad,
    )
    with torch.no_grad():
        out = hf.generate(input_ids=input_ids, attention_mask=mask, generation_config=config)
    completions = []
    for row in out[:, MAX_PROMPT:].tolist():
        cut = row.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in row else len(row)
        completions.append(row[:cut])
    rewards = torch.randint(0, 2, (prompts, samples)).float()
    adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)
    return {
        "prompt_ids": [x for x in ids for _ in range(samples)],
        "completion_ids": completions,
        "advantages": adv.reshape(-1).tolist(),
        "pad_id": pad,
        "eos_id": tokenizer.eos_token_id,
        "response_length": length,
    }


# --- timing, shared by the sides -----------------------------------------------------------------
def time_updates(update, warmup: int, updates: int, profile: bool, top: int, prepare=None) -> dict:
    """Seconds of each timed call of `update` (wall; the process's CPU time, the kernel's share of
    it and the page faults that cost it; the garbage collector's time inside it), each after an
    untimed `prepare()`, and with `profile` one more update's op table."""
    import gc
    import resource

    collecting = {"s": 0.0, "start": 0.0}

    def on_gc(phase, info):
        if phase == "start":
            collecting["start"] = time.perf_counter()
        else:
            collecting["s"] += time.perf_counter() - collecting["start"]

    gc.callbacks.append(on_gc)
    for _ in range(warmup):
        if prepare:
            prepare()
        update()
    seconds, cpu, system, faults, gc_s = [], [], [], [], []
    for _ in range(updates):
        if prepare:
            prepare()
        collecting["s"] = 0.0
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        update()
        seconds.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_SELF)
        gc_s.append(collecting["s"])
        system.append(after.ru_stime - before.ru_stime)
        cpu.append(after.ru_utime - before.ru_utime + system[-1])
        faults.append(after.ru_minflt - before.ru_minflt)
    result = {"seconds": seconds, "cpu_s": cpu, "system_s": system, "minor_faults": faults, "gc_s": gc_s}
    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        if prepare:
            prepare()
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            update()
            result["profiled_s"] = time.perf_counter() - start
        events = prof.key_averages()
        result["ops"] = [
            {
                "name": e.key,
                "calls": e.count,
                "self_ms": e.self_cpu_time_total / 1e3,
                "total_ms": e.cpu_time_total / 1e3,
            }
            for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:top]
        ]
        result["num_op_calls"] = sum(e.count for e in events)
        # the framework's own labelled regions (FSDP2's hooks and copies, the optimizer), by total time
        result["regions"] = [
            {"name": e.key, "calls": e.count, "total_ms": e.cpu_time_total / 1e3}
            for e in sorted(events, key=lambda e: -e.cpu_time_total)
            if e.key.startswith(("FSDP::", "Optimizer."))
        ]
    gc.callbacks.remove(on_gc)
    return result


# --- TRL's side (TRL's venv) ----------------------------------------------------------------------
def trl_side(a, batch: dict) -> dict:
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, HERE)
    from bench_trl_side import grpo_config
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    spec = dict(
        out=tempfile.mkdtemp(prefix="bench_update_trl-"),
        prompts=a.prompts,
        samples=a.samples,
        response_length=a.response_length,
        lr=3e-5,
        weight_decay=0.0,
        steps=1000,
        seed=0,
    )
    model = AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.float32)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
        args=grpo_config(spec),
        train_dataset=Dataset.from_list([{"prompt": "x"}]),
        processing_class=AutoTokenizer.from_pretrained(a.model_dir),
    )
    trainer.create_optimizer_and_scheduler(num_training_steps=1000)
    trainer._prepare_inputs = lambda inputs: inputs  # the batch is given: no generation
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop: one step, no accumulation
    pad = batch["pad_id"]
    width = max(len(c) for c in batch["completion_ids"])
    prompt_ids = torch.tensor([[pad] * (MAX_PROMPT - len(p)) + p for p in batch["prompt_ids"]])
    completion_ids = torch.tensor([c + [pad] * (width - len(c)) for c in batch["completion_ids"]])
    completion_mask = torch.tensor([[1] * len(c) + [0] * (width - len(c)) for c in batch["completion_ids"]])
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": (prompt_ids != pad).long(),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.tensor(batch["advantages"]),
        "num_items_in_batch": completion_mask.sum(),
    }
    model, optimizer, scheduler = trainer.model, trainer.optimizer, trainer.lr_scheduler

    def run_once():  # transformers' Trainer per optimizer step (gradient_accumulation_steps=1)
        trainer.training_step(model, dict(inputs), inputs["num_items_in_batch"])
        trainer.accelerator.clip_grad_norm_(model.parameters(), trainer.args.max_grad_norm)
        optimizer.step()
        scheduler.step()
        model.zero_grad()

    out = time_updates(run_once, a.warmup, a.updates, a.profile, a.top)
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper, or the optimizer itself
    out["optimizer"] = f"{type(inner).__name__}, fused={inner.defaults.get('fused')}"
    return out


# --- verl_lite's side (project venv) ----------------------------------------------------------------
def verl_side(a, batch: dict, rollout_name: str | None) -> dict:
    """The actor's update; with `rollout_name` the worker's loop around it in this process: each
    timed update follows a weight sync and a generation of the batch's prompts (not timed), as in
    a worker's step, so what generation leaves behind (garbage, allocator state) is there too."""
    import torch
    import torch.distributed as dist

    sys.path.insert(0, REPO)
    from bench_vs_trl import verl_overrides

    from verl_lite.config.compose import load_config
    from verl_lite.engine.fsdp_engine import FSDPEngine
    from verl_lite.engine.mesh import build_layout
    from verl_lite.rollout.base import SamplingParams, assemble
    from verl_lite.workers.actor import PPOActor
    from verl_lite.workers.actor_rollout_ref import entropy_math

    torch.set_num_threads(1)
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("gloo", rank=0, world_size=1, timeout=datetime.timedelta(seconds=600))
    ns = argparse.Namespace(
        prompts=a.prompts,
        samples=a.samples,
        response_length=a.response_length,
        remove_padding="True",
        lr=3e-5,
        weight_decay=0.0,
        kv_cache_gb=a.kv_cache_gb,
        steps=1000,
    )
    run = tempfile.mkdtemp(prefix="bench_update_verl-")
    skip = ("hydra.", "data.train_files", "data.val_files")
    side = rollout_name or "hf"
    overrides = [o for o in verl_overrides(ns, side, 0, a.model_dir, run, "", "") if not o.startswith(skip)]
    cfg = load_config(overrides, "demo")
    arr = cfg.actor_rollout_ref
    engine = FSDPEngine(
        arr.model, arr.actor.fsdp_config, build_layout("cpu"), role="actor", optim_cfg=arr.actor.optim,
        grad_clip=arr.actor.grad_clip, entropy=entropy_math(arr.actor),
    )  # fmt: skip
    actor = PPOActor(engine, arr.actor, a.response_length, 1.0)
    pad = batch["pad_id"]
    prompt_ids = torch.tensor([[pad] * (MAX_PROMPT - len(p)) + p for p in batch["prompt_ids"]])
    prompt_mask = (prompt_ids != pad).long()
    raw = torch.tensor([c + [pad] * (a.response_length - len(c)) for c in batch["completion_ids"]])
    tensors = assemble(
        prompt_ids, prompt_mask, (prompt_mask.cumsum(-1) - 1).clamp(min=0), raw, 1, a.response_length,
        eos_id=batch["eos_id"], pad_id=pad,
    )  # fmt: skip
    tensors["advantages"] = torch.tensor(batch["advantages"]).unsqueeze(1) * tensors["response_mask"]
    rows = len(raw)
    around = {"sync_s": [], "generate_s": []}
    if rollout_name:
        from verl_lite.rollout import build_rollout
        from verl_lite.rollout.weight_sync import build_weight_sync
        from verl_lite.utils.hf_model import load_tokenizer

        rollout = build_rollout(rollout_name, arr.model, arr.rollout, load_tokenizer(a.model_dir), 0)
        sync = build_weight_sync(engine, rollout, bucket_bytes=rollout_bucket(arr), dtype=torch.float32)
        params = SamplingParams(n=a.samples, temperature=1.0, top_k=-1, response_length=a.response_length)
        prompts, masks = prompt_ids[:: a.samples], prompt_mask[:: a.samples]

    def prepare():  # a worker's step before its update
        start = time.perf_counter()
        sync()
        around["sync_s"].append(time.perf_counter() - start)
        rollout.generate_tokens(prompts, masks, params)
        around["generate_s"].append(time.perf_counter() - start - around["sync_s"][-1])

    def update():
        actor.update_own_first(dict(tensors), rows, rows)

    out = time_updates(update, a.warmup, a.updates, a.profile, a.top, prepare if rollout_name else None)
    out.update(around)
    return out


def rollout_bucket(arr) -> int:
    return int(arr.rollout.update_weights_bucket_megabytes * 1024**2)


# --- the orchestrator --------------------------------------------------------------------------------
def run_side(a, side: str, batch_path: str, trl_python: str | None) -> dict:
    python = trl_python if side == "trl" else sys.executable
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", VLLM_LOGGING_LEVEL="ERROR")
    if side != "trl":
        env["PYTHONPATH"] = REPO
    skip = ("sides", "profile", "out", "side", "batch")
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in vars(a).items() if k not in skip and v is not None]
    cmd = [python, __file__, f"--side={side}", f"--batch={batch_path}", *argv]
    if a.profile:
        cmd.append("--profile")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"side {side} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def print_profile(side: str, res: dict, top: int) -> None:
    print(f"\n{side}: profiled update {res['profiled_s']:.3f} s, {res['num_op_calls']} op calls")
    print(f"{'op':48} {'calls':>7} {'self ms':>9} {'total ms':>9}")
    for op in res["ops"][:top]:
        print(f"{op['name'][:48]:48} {op['calls']:>7} {op['self_ms']:>9.1f} {op['total_ms']:>9.1f}")
    for region in res["regions"]:
        print(f"{region['name'][:48]:48} {region['calls']:>7} {'':>9} {region['total_ms']:>9.1f}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="21m", help="bench_vs_trl_setup.build_model_dir's names")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--response-length", type=int, default=110)
    p.add_argument("--sides", default="trl,verl")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--updates", type=int, default=3)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--kv-cache-gb", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "verl_lite"))
    p.add_argument("--out", default=None)
    p.add_argument("--side", help=argparse.SUPPRESS)  # set in the per-side child process
    p.add_argument("--batch", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    return p.parse_args()


def child(a) -> None:
    with open(a.batch) as f:
        batch = json.load(f)
    res = trl_side(a, batch) if a.side == "trl" else verl_side(a, batch, ROLLOUT_OF_SIDE[a.side])
    print("RESULT " + json.dumps(res), flush=True)


def main() -> None:
    a = parse_args()
    if a.side:
        child(a)
        return
    sys.path.insert(0, HERE)
    from bench_vs_trl_setup import build_model_dir, ensure_trl_python, machine_line

    out = a.out or tempfile.mkdtemp(prefix="bench_update-")
    a.model_dir, num_params = build_model_dir(a.model, os.path.join(out, "models"))
    batch = sample_batch(a.model_dir, a.prompts, a.samples, a.response_length, a.seed)
    batch_path = os.path.join(out, "batch.json")
    with open(batch_path, "w") as f:
        json.dump(batch, f)
    lengths = sorted(len(c) for c in batch["completion_ids"])
    sides = [s for s in a.sides.split(",") if s]
    trl_python = ensure_trl_python(a.cache_dir) if "trl" in sides else None
    print(
        f"the update alone: model {a.model} ({num_params:,} params), {a.prompts}x{a.samples} rows, "
        f"responses {lengths[0]}-{lengths[-1]} tokens (median {statistics.median(lengths)}, "
        f"{sum(lengths)} in all), {a.warmup} warm-up + {a.updates} timed updates per process, "
        f"{a.repeats} repeat(s)\n{datetime.datetime.now():%Y-%m-%d %H:%M}, {machine_line()} (at start)",
        flush=True,
    )
    results: dict[str, list] = {s: [] for s in sides}
    for repeat in range(a.repeats):
        for side in sides:
            res = run_side(a, side, batch_path, trl_python)
            results[side].append(res)
            print(
                f"repeat {repeat} {side}: " + " ".join(f"{s:.3f}" for s in res["seconds"])
                + " s; CPU " + " ".join(f"{s:.2f}" for s in res["cpu_s"])
                + " s, of it in the kernel " + " ".join(f"{s:.2f}" for s in res["system_s"])
                + " s; minor faults " + " ".join(str(n) for n in res["minor_faults"])
                + "; gc " + " ".join(f"{s * 1e3:.1f}" for s in res["gc_s"]) + " ms"
                + "".join(f"; {k} " + " ".join(f"{x:.3f}" for x in res[k]) for k in ("sync_s", "generate_s") if res.get(k)),
                flush=True,
            )  # fmt: skip
    print(f"{machine_line()} (at end)")
    medians = {}
    for key in ("seconds", "cpu_s"):
        medians[key] = {s: statistics.median(x for r in runs for x in r[key]) for s, runs in results.items()}
    for side in sides:
        line = [f"{side:5} update"]
        for key, name in (("seconds", "wall"), ("cpu_s", "CPU")):
            values = [x for r in results[side] for x in r[key]]
            ratio = f" = {medians[key][side] / medians[key]['trl']:.2f}x TRL" if "trl" in medians[key] else ""
            line.append(f"{name} {medians[key][side]:.3f} s ({min(values):.3f}-{max(values):.3f}){ratio}")
        print(" ".join(line) + f"; over {len(values)} updates")
    if a.profile:
        for side in sides:
            print_profile(side, results[side][-1], a.top)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"args": vars(a), "lengths": lengths, "runs": results, "medians": medians}, f, indent=1)
    print(f"results: {os.path.join(out, 'results.json')}")


if __name__ == "__main__":
    main()
