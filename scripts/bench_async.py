"""Asynchronous rollout measured on CPU, side by side in one run (issue #36 part 3).

    python scripts/bench_async.py --case straggler        # from the repository root
    python scripts/bench_async.py --case colocate
    python scripts/bench_async.py --case learning

`--case straggler`: do trajectories wait for each other's tools? The repo's ToolAgentLoop runs 32
trajectories of 3 tool turns and an answer each through the AgentLoopRunner; in turn k (k = 1..3)
trajectory k-1's tool (tests/tools/user_tools.py's SleepTool, a blocking `def` run in its own
thread) sleeps 1.5 s, every other call 0 s. The engine is the agent-loop tests' scripted one
(tests/agent_loop/scripted.py: it returns each trajectory's scripted turns at once), so the time
measured is scheduling and the loops' own work (parsing, rendering), no model compute; the
tokenization sanity check is off (the scripted calls render differently from the template's, and
diffing 32 conversations after the rollout is not scheduling). Three runs, each `--repeats` times (the median):
  - barrier:    the per-turn barrier (hold_s=inf: an engine call once every live trajectory is
                parked), what main did before #36: every turn waits for its slow tool, ~3 x 1.5 s;
  - continuous: the scheduler's default (agent_loop/scheduler.py): a trajectory away past the hold
                no longer holds the others;
  - slowest alone: the slowest trajectory (one 1.5 s tool) run by itself: the floor.
The last line reads `straggler: R x the slowest trajectory`, R = continuous / slowest alone.

`--case colocate`: verl 0.9's colocate_async and separate_async against sync on a task with
long-tailed response lengths, the same 2 CPU workers (vLLM rollout), one after the other: sync and
colocate_async train and generate on both; separate_async trains on one and generates on the other
(its rollout group), parameter_sync_step 1 (one update a step, as the others). The task: the embedded arith
prompts and a randomly initialised model of the tiny Qwen2's shape whose end-of-sequence token is
made likely enough (`--p-eos` per token, tuned on its own hidden states) that response lengths are
about geometric: most short, a few up to response_length. Each mode trains `--steps` steps; the
first is left out (engine warm-up). Reported per mode: response tokens trained per second
(perf/total_num_tokens' response part over timing_s/step), step time, response lengths, staleness.
The last lines read `colocate: R x sync tokens/s` and `separate: R x sync tokens/s`.

`--case tool_tail`: a real training run with a tool whose latency has a long tail: the tool demo
(conf/tool_demo.yaml: the warm-started tiny model calling its calculator) with the calculator of
tests/tools/user_tools.py's LongTailCalculatorTool, which answers in 0.02 s, or `--slow-s` seconds
for the one expression in `--every` whose hash says so, as code-execution and search tools answer.
sync, colocate_async and separate_async (1 trainer + 1 rollout worker) on the same 2 CPU workers,
16 prompts x n=4 a step, `--steps` steps (the first left out). Under sync every step waits for its
slowest call; under the async modes a trajectory in a slow call is left to finish in a later round
while the step trains on the groups that finished (agent_loop/rounds.py). The last lines read
`tool_tail: <mode> R x sync tokens/s`.

`--case learning`: do the async modes learn as well as sync? The embedded demo as `make run` runs it
(conf/demo.yaml: 120 GRPO steps, greedy validation on the 1,000 validation prompts every 20 steps),
data.seed 1, 2, 3, for sync and for colocate_async (1 warm-up batch) at max_off_policy_threshold 1
and 4, and at 4 with rollout correction's token-level importance weights, and for separate_async
(1 trainer + 1 rollout worker, parameter_sync_step 2: the demo's two mini-batches) at threshold 1 and
4 (`--only` picks modes, sync always runs). Printed: each run's validation curve, and per mode the final validation reward's mean and
seed spread (max - min); the last line says whether every async mode's mean is within sync's spread
of sync's mean (or above it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the tests' scripted engine and tool classes
sys.path.insert(0, os.path.join(ROOT, "scripts"))  # plot_val_curves

N, TURNS, SLOW_S = 32, 3, 1.5
P, R = 24, 400
ANSWER = "#### 7<|im_end|>"


def call(seconds: float) -> str:
    return f'<tool_call>{{"name": "sleep", "arguments": {{"seconds": "{seconds:g}"}}}}</tool_call><|im_end|>'


def straggler_scripts(trajectories: list[int]) -> list[list[str]]:
    """Trajectory t's turns: 3 calls of the sleep tool (SLOW_S in turn t + 1, else 0), then an answer."""
    return [[call(SLOW_S if k == t else 0) for k in range(TURNS)] + [ANSWER] for t in trajectories]


def run_straggler(trajectories: list[int], hold_s: float | None, tool_config: str) -> tuple[float, int]:
    """(wall seconds of the rollout, engine calls)."""
    from tests.agent_loop.scripted import ScriptedRollout, prompt_batch, tool_tokenizer
    from tests.helpers.configs import tiny_rollout
    from verl_lite.agent_loop.runner import AgentLoopRunner
    from verl_lite.rollout.base import SamplingParams

    tok = tool_tokenizer()
    cfg = tiny_rollout(prompt_length=P, response_length=R)
    cfg.multi_turn.tool_config_path = tool_config
    cfg.multi_turn.max_assistant_turns = TURNS + 1
    # the scripted calls render differently from the chat template's (no newlines around them): the
    # strict check's diff of 32 conversations costs seconds after the rollout, and is no scheduling
    cfg.multi_turn.tokenization_sanity_check_mode = "disable"
    engine = ScriptedRollout(tok, straggler_scripts(trajectories))
    runner = AgentLoopRunner(engine, tok, cfg, hold_s=hold_s)
    question = [{"role": "user", "content": "3+4="}]
    batch = prompt_batch(
        tok, [question] * len(trajectories), P, agent_name=["tool_agent"] * len(trajectories)
    )
    start = time.perf_counter()
    out = runner.run(batch, SamplingParams(n=1, response_length=R))
    seconds = time.perf_counter() - start
    turns = out.non_tensor_batch["__num_turns__"].tolist()
    assert turns == [2 * TURNS + 2] * len(trajectories), (
        f"every trajectory calls its tool {TURNS} times: {turns}"
    )
    return seconds, len(engine.calls)


def straggler(repeats: int) -> None:
    from tests.helpers.agent import tool_entry, user_tool, write_yaml

    tool_config = write_yaml(
        Path(tempfile.mkdtemp(prefix="bench_async_")) / "tools.yaml",
        {"tools": [tool_entry(user_tool("SleepTool"), "sleep", {"seconds": "s"})]},
    )
    runs = {
        "barrier (hold_s=inf, before #36)": (list(range(N)), math.inf),
        "continuous (default)": (list(range(N)), None),
        "slowest trajectory alone": ([TURNS - 1], None),
    }
    results = {}
    for name, (trajectories, hold) in runs.items():
        times, calls = [], 0
        for _ in range(repeats):
            seconds, calls = run_straggler(trajectories, hold, tool_config)
            times.append(seconds)
        results[name] = (statistics.median(times), calls, times)
    alone = results["slowest trajectory alone"][0]
    print(
        f"straggler: {N} trajectories x {TURNS} tool turns, in turn k trajectory k-1's tool sleeps {SLOW_S:g} s "
        f"(others 0 s); ToolAgentLoop, scripted engine; median of {repeats}; load {os.getloadavg()}"
    )
    print("| run | seconds (median) | engine calls | x the slowest trajectory | all runs (s) |")
    print("|---|---|---|---|---|")
    for name, (median, calls, times) in results.items():
        print(
            f"| {name} | {median:.3f} | {calls} | {median / alone:.2f} | {', '.join(f'{t:.3f}' for t in times)} |"
        )
    print(f"straggler: {results['continuous (default)'][0] / alone:.2f} x the slowest trajectory")


def long_tail_model(folder: Path, p_eos: float) -> str:
    """A random model of the tiny Qwen2's shape (untied head) whose EOS row is moved along the mean
    final hidden state until EOS takes `p_eos` of the probability on random contexts."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from verl_lite.data import assets

    source = assets.resolve("verl_lite://tiny-qwen2-arith")
    config = AutoConfig.from_pretrained(source)
    config.tie_word_embeddings = False
    config.max_position_embeddings = 256  # room for 128-token responses (the weights are random anyway)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    eos, vocab = config.eos_token_id, config.vocab_size
    with torch.no_grad():
        hidden = model.model(torch.randint(3, vocab, (64, 48))).last_hidden_state.reshape(
            -1, config.hidden_size
        )
        row, direction = model.lm_head.weight[eos].clone(), hidden.mean(0)

        def share(alpha: float) -> float:
            model.lm_head.weight[eos] = row + alpha * direction
            return torch.softmax(model.lm_head(hidden), -1)[:, eos].mean().item()

        low, high = 0.0, 1.0
        while share(high) < p_eos:
            high *= 2
        for _ in range(40):
            low, high = (
                (low, (low + high) / 2) if share((low + high) / 2) > p_eos else ((low + high) / 2, high)
            )
        share(high)
    model.save_pretrained(folder)
    for name in os.listdir(source):
        if name not in ("config.json", "model.safetensors", "DONE"):  # the tokenizer, its chat template
            shutil.copy(os.path.join(source, name), folder / name)
    return str(folder)


def train(out: Path, overrides: list[str], config_name: str = "demo") -> list[dict]:
    """`python -m verl_lite.main_ppo --config-name=<config_name> <overrides>` into `out`; its metrics rows."""
    cmd = [
        sys.executable,
        "-m",
        "verl_lite.main_ppo",
        f"--config-name={config_name}",
        f"hydra.run.dir={out}",
        f"trainer.default_local_dir={out}",
        "trainer.logger=[file]",
        *overrides,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    with open(out / "metrics.jsonl") as f:
        return [json.loads(line) for line in f]


def run_mode(model: str, out: Path, steps: int, extra: list[str]) -> list[dict]:
    overrides = [
        f"actor_rollout_ref.model.path={model}",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "data.max_response_length=128",
        "data.train_batch_size=16",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        *extra,
    ]
    return [row for row in train(out, overrides) if "actor/pg_loss" in row]


def colocate(steps: int, p_eos: float) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench_colocate_"))
    model = long_tail_model(work / "model", p_eos)
    colocate_async = ["trainer.use_v1=True", "trainer.v1.trainer_mode=colocate_async"]
    modes = {
        "sync": [],
        **{
            f"colocate_async ({w} warm-up batch{'es' if w > 1 else ''})": [
                *colocate_async,
                f"trainer.v1.colocate_async.num_warmup_batches={w}",
            ]
            for w in (1, 2)
        },
        **{  # its own rollout worker beside one trainer worker: the same 2 CPU workers
            f"separate_async (1 trainer + 1 rollout worker, {w} warm-up batch{'es' if w > 1 else ''})": [
                "trainer.use_v1=True",
                "trainer.v1.trainer_mode=separate_async",
                f"trainer.v1.separate_async.num_warmup_batches={w}",
                "trainer.v1.separate_async.parameter_sync_step=1",  # 16 prompts = 1 x ppo_mini_batch_size
                "trainer.n_gpus_per_node=1",
                "actor_rollout_ref.rollout.nnodes=1",
                "actor_rollout_ref.rollout.n_gpus_per_node=1",
            ]
            for w in (1, 2)
        },
    }
    results = {}
    for i, (name, extra) in enumerate(modes.items()):
        rows = run_mode(model, work / f"mode{i}", steps, extra)[1:]  # step 1: the engines warm up
        seconds = sum(r["timing_s/step"] for r in rows)
        tokens = sum(r["response_length/mean"] * 16 * 4 for r in rows)  # 16 prompts x n=4 responses a step
        results[name] = (tokens / seconds, seconds / len(rows), rows)
    print(
        f"colocate: tiny Qwen2 shape, random weights with P(EOS) ~ {p_eos:g} per token, response_length 128, "
        f"16 prompts x n=4 per step, 2 CPU workers, vLLM; steps 2-{steps}; load {os.getloadavg()}"
    )
    print("| mode | tokens/s | step s | resp len mean | resp len max | staleness_worst mean | spans max |")
    print("|---|---|---|---|---|---|---|")
    for name, (rate, step_s, rows) in results.items():
        mean_len = statistics.mean(r["response_length/mean"] for r in rows)
        max_len = max(r["response_length/max"] for r in rows)
        worst = statistics.mean(r.get("training/off_policy/trajectory_staleness_worst/mean", 0) for r in rows)
        spans = max(r.get("training/off_policy/trajectory_spans/max", 1) for r in rows)
        print(
            f"| {name} | {rate:.0f} | {step_s:.2f} | {mean_len:.1f} | {max_len:.0f} | {worst:.2f} | {spans:.0f} |"
        )
    sync = results["sync"][0]
    for mode in ("colocate_async", "separate_async"):
        best = max(r[0] for name, r in results.items() if name.startswith(mode))
        print(f"{mode.split('_')[0]}: {best / sync:.2f} x sync tokens/s (the better {mode} run)")


def tool_tail(steps: int, slow_s: float, every: int) -> None:
    import yaml

    from verl_lite.data import assets

    work = Path(tempfile.mkdtemp(prefix="bench_tool_tail_"))
    tools = yaml.safe_load(open(assets.resolve("verl_lite://arith-tool/tool_config.yaml")))
    tool = tools["tools"][0]
    tool["class_name"] = "tests.tools.user_tools.LongTailCalculatorTool"
    tool["config"].update(slow_s=slow_s, fast_s=0.02, every=every)
    config = work / "tool_config.yaml"
    config.write_text(yaml.safe_dump(tools))
    base = [
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={config}",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "data.train_batch_size=16",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    ]
    modes = {
        "sync": [],
        "colocate_async (1 warm-up batch)": [
            "trainer.use_v1=True",
            "trainer.v1.trainer_mode=colocate_async",
            "trainer.v1.colocate_async.num_warmup_batches=1",
        ],
        "separate_async (1 trainer + 1 rollout worker, 1 warm-up batch)": [
            "trainer.use_v1=True",
            "trainer.v1.trainer_mode=separate_async",
            "trainer.v1.separate_async.num_warmup_batches=1",
            "trainer.v1.separate_async.parameter_sync_step=1",
            "trainer.n_gpus_per_node=1",
            "actor_rollout_ref.rollout.nnodes=1",
            "actor_rollout_ref.rollout.n_gpus_per_node=1",
        ],
    }
    results = {}
    for i, (name, extra) in enumerate(modes.items()):
        rows = [r for r in train(work / f"mode{i}", [*base, *extra], "tool_demo") if "actor/pg_loss" in r]
        rows = rows[1:]  # step 1: the engines warm up
        seconds = sum(r["timing_s/step"] for r in rows)
        tokens = sum(r["response_length/mean"] * 16 * 4 for r in rows)
        results[name] = (tokens / seconds, seconds / len(rows), rows)
    print(
        f"tool_tail: the tool demo (conf/tool_demo.yaml), its calculator answering in 0.02 s, or {slow_s:g} s "
        f"for 1 expression in {every}; 16 prompts x n=4 per step, 2 CPU workers, vLLM; steps 2-{steps}; "
        f"load {os.getloadavg()}"
    )
    print("| mode | tokens/s | step s | gen s | tool calls / trajectory | score | spans max |")
    print("|---|---|---|---|---|---|---|")
    for name, (rate, step_s, rows) in results.items():
        gen = statistics.mean(r["timing_s/gen"] for r in rows)
        calls = statistics.mean(r["tool_call_counts/mean"] for r in rows)
        score = statistics.mean(r["critic/score/mean"] for r in rows)
        spans = max(r.get("training/off_policy/trajectory_spans/max", 1) for r in rows)
        print(f"| {name} | {rate:.0f} | {step_s:.2f} | {gen:.2f} | {calls:.2f} | {score:.3f} | {spans:.0f} |")
    sync = results["sync"][0]
    for name, (rate, _, _) in results.items():
        if name != "sync":
            print(f"tool_tail: {name.split(' ')[0]} {rate / sync:.2f} x sync tokens/s")


def learning(seeds: list[int], only: list[str]) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench_learning_"))
    colocate_async = ["trainer.use_v1=True", "trainer.v1.trainer_mode=colocate_async"]
    modes = {
        "sync": [],
        "colocate_async, threshold 1": [*colocate_async, "trainer.v1.sampler.max_off_policy_threshold=1"],
        "colocate_async, threshold 4": [*colocate_async, "trainer.v1.sampler.max_off_policy_threshold=4"],
        "colocate_async, threshold 4, token IS": [  # rollout correction: verl's advice for async
            *colocate_async,
            "trainer.v1.sampler.max_off_policy_threshold=4",
            "actor_rollout_ref.rollout.calculate_log_probs=True",
            "algorithm.rollout_correction.rollout_is=token",
        ],
    }
    separate_async = [  # 1 trainer + 1 rollout worker; the demo's 32 prompts = 2 local updates of 16
        "trainer.use_v1=True",
        "trainer.v1.trainer_mode=separate_async",
        "trainer.v1.separate_async.parameter_sync_step=2",
        "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.n_gpus_per_node=1",
    ]
    for threshold in (1, 4):
        modes[f"separate_async, threshold {threshold}"] = [
            *separate_async,
            f"trainer.v1.sampler.max_off_policy_threshold={threshold}",
        ]
    modes = {name: extra for name, extra in modes.items() if name == "sync" or any(m in name for m in only)}
    key = "val-core/verl_lite/arith/reward/mean@1"
    finals: dict[str, list[float]] = {}
    print(
        f"learning: conf/demo.yaml (120 steps, validation every 20), data.seed {seeds}; load {os.getloadavg()}"
    )
    print("| mode | seed | validation reward at steps 0, 20, ..., 120 |")
    print("|---|---|---|")
    runs: list[tuple[Path, str]] = []
    for i, (name, extra) in enumerate(modes.items()):
        for seed in seeds:
            runs.append((work / f"mode{i}_seed{seed}", f"{name} / seed {seed}"))
            rows = train(runs[-1][0], [f"data.seed={seed}", *extra])
            curve = [(row["step"], row[key]) for row in rows if key in row]
            finals.setdefault(name, []).append(curve[-1][1])
            print(f"| {name} | {seed} | {', '.join(f'{v:.3f}' for _, v in curve)} |", flush=True)
    print("| mode | final mean | final spread (max - min) |")
    print("|---|---|---|")
    for name, values in finals.items():
        print(f"| {name} | {statistics.mean(values):.3f} | {max(values) - min(values):.3f} |")
    sync = finals.pop("sync")
    floor = statistics.mean(sync) - (max(sync) - min(sync))
    within = all(statistics.mean(v) >= floor for v in finals.values())
    from plot_val_curves import plot  # scripts/: every run's curve, one colour per mode

    figure = str(work / "learning.png")
    plot([str(p) for p, _ in runs], [label for _, label in runs], figure, "conf/demo.yaml: validation reward")
    print(f"learning: the curves in {figure}")
    print(f"learning: every async mode's final mean >= sync's mean - spread ({floor:.3f}): {within}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--case",
        required=True,
        choices=("straggler", "colocate", "tool_tail", "learning"),
        help="straggler: trajectories and their tools; colocate: colocate_async against sync (tokens/s); "
        "tool_tail: the same on the tool demo with a long-tailed tool latency; learning: validation curves",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12, help="colocate: training steps per mode")
    parser.add_argument(
        "--only",
        nargs="*",
        default=["colocate"],
        help="learning: the async modes whose names hold one of these",
    )
    parser.add_argument("--p-eos", type=float, default=1 / 30, help="colocate: EOS probability per token")
    parser.add_argument("--slow-s", type=float, default=2.0, help="tool_tail: a slow call's seconds")
    parser.add_argument("--every", type=int, default=8, help="tool_tail: one expression in this many is slow")
    args = parser.parse_args()
    if args.case == "straggler":
        straggler(args.repeats)
    elif args.case == "colocate":
        colocate(args.steps, args.p_eos)
    elif args.case == "tool_tail":
        tool_tail(args.steps, args.slow_s, args.every)
    else:
        learning([1, 2, 3], args.only)


if __name__ == "__main__":
    main()
