"""verl_lite against TRL's GRPOTrainer on the same work: step time, where it goes, and learning.

    flock /tmp/verl_lite_cpu.lock python scripts/bench_vs_trl.py                 # tiny preset
    python scripts/bench_vs_trl.py --preset 20m                                  # ~20M params, 128 tokens
    python scripts/bench_vs_trl.py --sides trl,hf,vllm --steps 30 --repeats 3 --prompts 32 --samples 8

Both sides train the same model (folder, tokenizer, weights) on the same arithmetic prompts with
the same hyper-parameters: GRPO, group-std advantages, token-mean loss, clip 0.2, no KL, lr 3e-5
constant, no weight decay, grad clip 1, one optimizer step per step (P prompts x G samples),
temperature 1 with no truncation, fp32, one thread per process. TRL runs in a virtual env of its
own, built on first use under --cache-dir (torch==2.13.0 in the same pip command as trl, so it is
the CPU wheel; TRL never becomes a dependency of the project): scripts/bench_trl_side.py.

Sides: trl; hf / vllm (verl_lite with that rollout, 1 worker); hf2 / vllm2 (2 workers, 1 thread
each). Runs are interleaved: each repeat runs every side once, with seed = repeat, so a burst of
load hits all sides of a repeat; each side's ratio is taken against the TRL run of its own repeat.
Step time is the median over steps 3..N (steps 1-2 warm up) of each side's own step timer
(verl_lite's timing_s/step, TRL's step callbacks). The ratio to TRL is taken on the cycle: the wall
time between the ends of consecutive steps (verl_lite: the arrival of each step's console block;
TRL: its step-end callback), median over steps 3..N-1 (step N saves the model), so whatever a side
does between its step timers -- logging, metrics, a rollout queued behind the update -- is counted
on both sides. Phases: TRL's generate, scoring
(the rest of its generate-and-score) and train (the rest of the step); verl_lite's gen,
old_log_prob, update, reward+adv, and dispatch = step minus the workers' own compute and the
driver's reward+adv (Ray calls, pickling, reordering, metrics). Accuracy is greedy, on the same
200 held-out prompts, evaluated by this script the same way for both sides' final weights.
Results print as a table and go to <out>/results.json. Record them in docs/performance.md with the
date, the machine and its load (printed).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(__file__))

from bench_vs_trl_setup import (  # noqa: E402
    build_model_dir,
    ensure_trl_python,
    evaluate_accuracy,
    machine_line,
    write_eval_set,
)

PRESETS = {
    "tiny": dict(model="tiny", prompts=8, samples=4, response_length=16, steps=20, repeats=3),
    "20m": dict(model="20m", prompts=8, samples=4, response_length=128, steps=10, repeats=1),
    # issue 25's independent measurement: 4 layers of 640, 128 positions, L=110, 8 steps
    "21m": dict(model="21m", prompts=8, samples=4, response_length=110, steps=8, repeats=1),
}
SIDES = ("trl", "hf", "vllm", "hf2", "vllm2")
FIRST_TIMED_STEP = 3


def verl_overrides(a, side: str, seed: int, model: str, run: str, eval_file: str, train: str) -> list[str]:
    workers = 2 if side.endswith("2") else 1
    rows = a.prompts * a.samples // workers
    rollout = side.rstrip("2")
    arr = "actor_rollout_ref"
    fp32 = [
        f"{arr}.actor.fsdp_config.{k}=fp32"
        for k in ("model_dtype", "mixed_precision.param_dtype", "mixed_precision.reduce_dtype")
    ]
    return [
        f"hydra.run.dir={run}",
        f"trainer.default_local_dir={run}",
        "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=True",
        "algorithm.use_kl_in_reward=False",
        f"data.train_files={train}",
        f"data.val_files={eval_file}",
        f"data.train_batch_size={a.prompts}",
        "data.max_prompt_length=16",
        f"data.max_response_length={a.response_length}",
        f"data.seed={seed}",
        f"{arr}.model.path={model}",
        f"{arr}.model.use_remove_padding={a.remove_padding}",
        f"{arr}.model.enable_gradient_checkpointing=False",
        f"{arr}.actor.ppo_mini_batch_size={a.prompts}",
        f"{arr}.actor.ppo_micro_batch_size_per_gpu={rows}",
        f"{arr}.actor.ppo_epochs=1",
        f"{arr}.actor.use_kl_loss=False",
        f"{arr}.actor.entropy_coeff=0",
        f"{arr}.actor.clip_ratio=0.2",
        f"{arr}.actor.loss_agg_mode=token-mean",
        f"{arr}.actor.grad_clip=1.0",
        f"{arr}.actor.optim.lr={a.lr}",
        f"{arr}.actor.optim.weight_decay={a.weight_decay}",
        f"{arr}.actor.optim.lr_warmup_steps_ratio=0.0",
        f"{arr}.actor.optim.warmup_style=constant",
        *fp32,
        f"{arr}.actor.checkpoint.save_contents=[model,hf_model]",
        f"{arr}.rollout.name={rollout}",
        f"{arr}.rollout.n={a.samples}",
        f"{arr}.rollout.temperature=1.0",
        f"{arr}.rollout.top_k=-1",
        f"{arr}.rollout.top_p=1.0",
        f"{arr}.rollout.do_sample=True",
        f"{arr}.rollout.dtype=fp32",
        f"{arr}.rollout.seed={seed}",
        f"{arr}.rollout.log_prob_micro_batch_size_per_gpu={rows}",
        f"{arr}.rollout.cpu_kv_cache_gb={a.kv_cache_gb}",
        f"trainer.n_gpus_per_node={workers}",
        "trainer.nnodes=1",
        f"trainer.total_training_steps={a.steps}",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        f"trainer.save_freq={a.steps}",
        "trainer.resume_mode=disable",
        "trainer.logger=[console,file]",  # the console block of each step marks its end (run_stamped)
        f"ray_kwargs.ray_init.num_cpus={workers}",
    ]


def run_logged(cmd: list[str], log_path: str, env: dict) -> None:
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    if proc.returncode != 0:
        with open(log_path) as f:
            tail = f.read()[-4000:]
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({proc.returncode}); its output ends:\n{tail}")


# verl_lite's console line that opens a step's block, written when the step ends: "step 3/8" alone or,
# since the one-line headline (main 9ddc6c7), "step 3/8 | score ... | step_s 7.0 | mem_gb 3.3"
STEP_BLOCK = re.compile(r"^step (\d+)/\d+(?:$| \|)")


def run_stamped(cmd: list[str], log_path: str, env: dict) -> dict[int, float]:
    """run_logged, also noting when each verl_lite step's console block arrives (perf_counter)."""
    ends: dict[int, float] = {}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=REPO, text=True
        )
        for line in proc.stdout:
            match = STEP_BLOCK.match(line.rstrip("\n").split("\r")[-1])  # after a progress bar's \r
            if match:
                ends[int(match.group(1))] = time.perf_counter()
            log.write(line)
        proc.wait()
    if proc.returncode != 0:
        with open(log_path) as f:
            tail = f.read()[-4000:]
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({proc.returncode}); its output ends:\n{tail}")
    return ends


def median_cycle(ends: list[float], last_step: int) -> float:
    """Median wall time between consecutive step ends (ends[k-1]: step k), steps 3..N-1."""
    cycles = [ends[k - 1] - ends[k - 2] for k in range(FIRST_TIMED_STEP, last_step)]
    return statistics.median(cycles)


WORKER_COMPUTE = (
    "timing_s/generate_local",
    "timing_s/update_weights",
    "timing_s/actor/compute_log_prob",
    "timing_s/actor/update",
)


def verl_phases(row: dict) -> dict[str, float]:
    """One step's phases; dispatch is what the step spent outside the workers' own compute (rank 0's)
    and the driver's reward and advantage math."""
    driver = row.get("timing_s/reward", 0.0) + row.get("timing_s/adv", 0.0)
    worker = sum(row.get(k, 0.0) for k in WORKER_COMPUTE)
    return {
        "step": row["timing_s/step"],
        "generate": row.get("timing_s/gen", 0.0),
        "old_log_prob": row.get("timing_s/old_log_prob", 0.0),
        "update": row.get("timing_s/update_actor", 0.0),
        "reward+adv": driver,
        "dispatch": row["timing_s/step"] - worker - driver,
        "response_len": row["response_length/mean"],
    }


def run_verl(a, side: str, seed: int, model: str, run: str, eval_file: str, train: str) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO, RAY_DEDUP_LOGS="0")
    cmd = [
        sys.executable,
        "-m",
        "verl_lite.main_ppo",
        "--config-name",
        "demo",  # the CPU demo; every value the comparison depends on is set below
        *verl_overrides(a, side, seed, model, run, eval_file, train),
    ]
    ends = run_stamped(cmd, run + ".console.txt", env)
    with open(os.path.join(run, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    steps = [verl_phases(r) for r in rows if r["step"] >= FIRST_TIMED_STEP]
    phases = {p: statistics.median(s[p] for s in steps) for p in steps[0]}
    phases["cycle"] = median_cycle([ends[k] for k in range(1, a.steps + 1)], a.steps)
    final = os.path.join(run, f"global_step_{a.steps}", "actor", "huggingface")
    return {"phases": phases, "final_model": final}


def run_trl(a, python: str, seed: int, model: str, run: str, train: str) -> dict:
    os.makedirs(run, exist_ok=True)
    spec = dict(
        model=model,
        train_file=train,
        repo=REPO,
        prompts=a.prompts,
        samples=a.samples,
        response_length=a.response_length,
        steps=a.steps,
        lr=a.lr,
        weight_decay=a.weight_decay,
        seed=seed,
        out=run,
    )
    with open(os.path.join(run, "spec.json"), "w") as f:
        json.dump(spec, f)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["OMP_NUM_THREADS"] = "1"
    script = os.path.join(REPO, "scripts", "bench_trl_side.py")
    run_logged([python, script, os.path.join(run, "spec.json")], run + ".console.txt", env)
    with open(os.path.join(run, "trl_steps.json")) as f:
        all_steps = json.load(f)
    steps = all_steps[FIRST_TIMED_STEP - 1 :]

    def med(key: str) -> float:
        return statistics.median(s.get(key, 0.0) for s in steps)

    phases = {
        "step": med("step_s"),
        "cycle": median_cycle([s["end_s"] for s in all_steps], a.steps),
        "generate": med("generate_s"),
        "reward+adv": med("generate_and_score_s") - med("generate_s"),
        "update": med("step_s") - med("generate_and_score_s"),
        "response_len": med("completion_mean_length"),
    }
    return {"phases": phases, "final_model": os.path.join(run, "model")}


def summarize(results: dict, sides: list[str]) -> dict:
    """Per side: median step time, median ratio to the TRL run of the same repeat, median phases, mean
    accuracy gain."""
    out = {}
    trl_cycles = [r["phases"]["cycle"] for r in results["trl"]] if "trl" in results else None
    for side in sides:
        runs = results[side]
        ratios = [r["phases"]["cycle"] / t for r, t in zip(runs, trl_cycles)] if trl_cycles else []
        phase_names = runs[0]["phases"].keys()
        gains = [r["accuracy"] - results["start_accuracy"] for r in runs if r.get("accuracy") is not None]
        out[side] = {
            "step_s": statistics.median(r["phases"]["step"] for r in runs),
            "cycle_s": statistics.median(r["phases"]["cycle"] for r in runs),
            "ratio_to_trl": statistics.median(ratios) if ratios else None,
            "ratio_range": [min(ratios), max(ratios)] if ratios else None,
            "phases_s": {p: statistics.median(r["phases"][p] for r in runs) for p in phase_names},
            "accuracy_gain": statistics.mean(gains) if gains else None,
        }
    return out


def print_table(summary: dict, a, header: list[str]) -> None:
    print("\n".join(header))
    cols = ("generate", "old_log_prob", "update", "reward+adv", "dispatch", "response_len")
    print(
        f"{'side':8} {'cycle s':>8} {'x TRL':>6} {'(range)':>13} {'step s':>8} "
        + " ".join(f"{c:>12}" for c in cols)
        + "   acc gain"
    )
    for side, s in summary.items():
        ratio = f"{s['ratio_to_trl']:.2f}" if s["ratio_to_trl"] is not None else "-"
        rng = "{:.2f}-{:.2f}".format(*s["ratio_range"]) if s["ratio_range"] else "-"
        phases = " ".join(f"{s['phases_s'][c]:12.4f}" if c in s["phases_s"] else f"{'-':>12}" for c in cols)
        gain = f"{s['accuracy_gain']:+.3f}" if s["accuracy_gain"] is not None else "-"
        print(f"{side:8} {s['cycle_s']:8.4f} {ratio:>6} {rng:>13} {s['step_s']:8.4f} {phases}   {gain}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--model", choices=("tiny", "tiny-random", "20m"))
    p.add_argument("--prompts", type=int, help="P: prompts per step")
    p.add_argument("--samples", type=int, help="G: samples per prompt")
    p.add_argument("--response-length", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--repeats", type=int)
    p.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, of {SIDES}")
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--remove-padding", choices=("True", "False"), default="True", help="verl_lite packing")
    p.add_argument("--kv-cache-gb", type=float, default=0.25, help="vLLM CPU KV cache per worker")
    p.add_argument("--no-eval", action="store_true", help="skip the accuracy evaluation")
    p.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "verl_lite"))
    p.add_argument("--out", default=None, help="results folder (default: a new temp folder)")
    a = p.parse_args()
    for key, value in PRESETS[a.preset].items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    a.sides = [s for s in a.sides.split(",") if s]
    unknown = [s for s in a.sides if s not in SIDES]
    if unknown:
        p.error(f"--sides: unknown {unknown}; choose from {SIDES}")
    if a.steps < FIRST_TIMED_STEP:
        p.error(f"--steps must be at least {FIRST_TIMED_STEP} (steps 1-2 are warm-up)")
    return a


def main() -> None:
    a = parse_args()
    out = a.out or tempfile.mkdtemp(prefix="bench_vs_trl-")
    os.makedirs(out, exist_ok=True)
    from verl_lite.data import assets

    train = assets.resolve("verl_lite://arith/train.parquet")
    eval_file = write_eval_set(os.path.join(out, "eval200.parquet"))
    model, num_params = build_model_dir(a.model, os.path.join(out, "models"))
    trl_python = ensure_trl_python(a.cache_dir) if "trl" in a.sides else None
    header = [
        f"verl_lite vs TRL GRPO: model {a.model} ({num_params:,} params), P={a.prompts} G={a.samples}, "
        f"{a.response_length}-token responses, {a.steps} steps (timed {FIRST_TIMED_STEP}..{a.steps}), "
        f"{a.repeats} repeat(s), lr {a.lr}, remove_padding={a.remove_padding}",
        f"{datetime.datetime.now():%Y-%m-%d %H:%M}, {machine_line()} (at start)",
    ]
    print("\n".join(header), flush=True)
    results: dict = {side: [] for side in a.sides}
    results["start_accuracy"] = (
        None if a.no_eval else evaluate_accuracy(model, model, eval_file, a.response_length)
    )
    for repeat in range(a.repeats):
        for side in a.sides:
            run = os.path.join(out, f"r{repeat}-{side}")
            if side == "trl":
                res = run_trl(a, trl_python, repeat, model, run, train)
            else:
                res = run_verl(a, side, repeat, model, run, eval_file, train)
            if not a.no_eval:
                res["accuracy"] = evaluate_accuracy(res["final_model"], model, eval_file, a.response_length)
            results[side].append(res)
            p = res["phases"]
            print(f"repeat {repeat} {side}: cycle {p['cycle']:.4f} s, step {p['step']:.4f} s", flush=True)
    header.append(f"{machine_line()} (at end); start accuracy {results['start_accuracy']}")
    summary = summarize(results, a.sides)
    print_table(summary, a, header)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"args": vars(a), "header": header, "runs": results, "summary": summary}, f, indent=1)
    print(f"results: {os.path.join(out, 'results.json')}")


if __name__ == "__main__":
    main()
