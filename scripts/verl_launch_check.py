"""Run verl's own launch lines through verl_lite, as a verl user would, and print a table.

    python scripts/verl_launch_check.py --verl /path/to/verl [--recipe /path/to/verl-recipe]
        [--only SUBSTRING ...] [--group examples|ci|docs|docs-yaml] [--list] [--dry]

`--verl` is a checkout of verl or its git directory; `--recipe` its recipe submodule (default: the
checkout's recipe/, at the commit verl pins). Both are copied (git archive) into one temporary verl
tree, the folder every line runs from, as from a verl checkout. scripts/verl_launches.py says what
runs: verl's examples, every tests/special_e2e FSDP step of its CI with that step's environment, the
`bash <script>` lines and YAML blocks of docs/algo/*.md.

A script runs under bash with `python`/`python3` (and `ray job submit ... --`) replaced by a
function that records its trainer call, so the shell expands the script's variables as it would for
verl. A recipe or experimental entry module becomes `verl_lite.main_ppo` with that module's own
config file as a user config (`--config-path=<its folder> --config-name=<its config>`, the recipe
layout). The recorded `key=value` arguments are kept as written, except the ones `tiny_args` swaps:
model and data paths (the embedded tiny model and arithmetic task; a tiny reward model built
locally), sizes (8 prompts per step with the script's number of mini-batches per step, micro-batches
that divide them, prompt/response 16/8 tokens, TP and sequence-parallel sizes at most 2, two CPU
workers on one node), one training step, no periodic validation, console and file logging, the
output folder, and a checkpoint at the end for LoRA runs (to see the adapter). Outcomes:

- ran: exit 0 after one step, and the metrics show what the config means in verl: the critic's
  losses exactly when there is a critic (gae or critic.enable), the KL loss exactly with use_kl_loss,
  the KL penalty exactly with use_kl_in_reward, rollout correction's importance-weight and rejection
  metrics exactly with rollout_is and rollout_rs, a saved LoRA adapter when lora_rank > 0;
- refused: exit 2 before Ray, every line naming what is not supported (a key, a file, a config name);
- failed: anything else (a traceback anywhere, a wrong meaning, another exit): a bug to fix.

Not part of the test suite (it needs verl's files and a minute per run); docs/verl_scripts.md keeps
the last table. Run outputs stay in --out (default: the temp dir's runs/), one folder per launch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import verl_launch_table  # noqa: E402
import verl_launches as catalogue  # noqa: E402
from verl_launch_args import (  # noqa: E402
    build_tree,
    entry_config,
    make_tiny_adapter_dir,
    recorded_call,
    tiny_args,
    user_config_call,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def composed(flags: list[str], args: list[str]):
    """verl_lite's built config for the call, as the CLI would compose it; None if it is refused."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from verl_lite.config.compose import build_config, compose_config, register_schema
    from verl_lite.config.overrides import normalize_argv

    given = dict(f.lstrip("-").split("=", 1) for f in flags)
    overrides = [a for a in args if not a.startswith("hydra.")]
    try:
        if "config-path" in given:
            register_schema()
            GlobalHydra.instance().clear()
            with initialize_config_dir(config_dir=given["config-path"], version_base=None):
                raw = compose(given.get("config-name", "ppo_trainer"), overrides=normalize_argv(overrides))
            GlobalHydra.instance().clear()
        else:
            raw = compose_config(overrides, given.get("config-name", "ppo_trainer"))
        return build_config(raw)
    except Exception:  # refused: the run says how
        GlobalHydra.instance().clear()
        return None


@dataclass
class Meaning:
    """What the config means in verl, read from verl_lite's composed config."""

    critic: bool
    kl_loss: bool
    kl_reward: bool
    rollout_is: bool
    rollout_rs: bool
    lora: bool

    @classmethod
    def of(cls, cfg) -> Meaning:
        from verl_lite.roles import uses_critic

        model, corr = cfg.actor_rollout_ref.model, cfg.algorithm.rollout_correction
        return cls(
            uses_critic(cfg),
            bool(cfg.actor_rollout_ref.actor.use_kl_loss),
            bool(cfg.algorithm.use_kl_in_reward),
            corr is not None and corr.rollout_is is not None,
            corr is not None and corr.rollout_rs is not None,
            (model.lora_rank or 0) > 0 or model.lora_adapter_path is not None,
        )


METRICS = {
    "critic": "critic/vf_loss",
    "kl_loss": "actor/kl_loss",
    "kl_reward": "actor/reward_kl_penalty",
    "rollout_is": "rollout_corr/rollout_is_mean",  # importance weights applied
    "rollout_rs": "rollout_corr/rollout_rs_masked_fraction",  # rejection applied
}
RUN_FAILURE = re.compile(r"trainer phase|raised in|worker .* died|timed out|Error\(")


def metrics_rows(out: str) -> list[dict]:
    path = os.path.join(out, "metrics.jsonl")
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []


def check_meaning(out: str, meaning: Meaning, resumed: bool, before: int = 0) -> tuple[bool, str]:
    """Whether the run's metrics and files show what the config means; what they show. A resumed run
    (`before`: the rows its first run left) must find the checkpoint and have no step left to run."""
    rows = metrics_rows(out)[before:]
    steps = [r for r in rows if r.get("step", 0) >= 1 and "actor/pg_loss" in r]
    if resumed:
        log = os.path.join(out, "main_ppo.log")
        found = re.findall(
            r"resumed from (\S+) at step (\d+)", open(log).read() if os.path.exists(log) else ""
        )
        if not found or steps:
            return False, "did not resume" if not found else "trained again after resuming"
        return (
            True,
            f"resumed from {os.path.basename(found[-1][0])} (step {found[-1][1]} of 1): nothing left to train",
        )
    if not steps:
        return False, "no training step in metrics.jsonl"
    row, shown, ok = (
        steps[-1],
        [f"step {steps[-1]['step']}", f"actor/pg_loss {steps[-1]['actor/pg_loss']:.4g}"],
        True,
    )
    for what, metric in METRICS.items():
        wanted, present = getattr(meaning, what), metric in row
        ok &= wanted == present
        if present:
            shown.append(f"{metric} {row[metric]:.4g}")
        elif wanted:
            shown.append(f"NO {metric}")
    if meaning.lora:
        adapter = os.path.join(
            out, f"global_step_{row['step']}", "actor", "lora_adapter", "adapter_model.safetensors"
        )
        ok &= os.path.exists(adapter)
        shown.append(
            f"LoRA adapter saved ({os.path.getsize(adapter) // 1024} KiB)"
            if os.path.exists(adapter)
            else "NO LoRA adapter"
        )
    return ok, ", ".join(shown)


@dataclass
class Outcome:
    name: str
    group: str
    outcome: str  # ran | refused | failed | skipped | dry
    seconds: float
    detail: str
    code: str = ""  # the verl_lite commit it ran on (code_label)


def classify(
    proc: subprocess.CompletedProcess, out: str, meaning: Meaning | None, resumed: bool, before: int = 0
) -> tuple[str, str]:
    text = proc.stdout + proc.stderr
    err = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    if "Traceback" in text:
        tail = [line for line in text.splitlines() if line.strip()][-3:]
        return "failed", "traceback: " + " | ".join(tail)
    if proc.returncode == 0:
        if meaning is None:
            return "failed", "ran, but verl_lite's config refuses these arguments when composed here"
        ok, shown = check_meaning(out, meaning, resumed, before)
        return ("ran" if ok else "failed"), shown
    lines = err[1:] if err and err[0].endswith("invalid input:") else err
    lines = [re.sub(r"^(verl_lite: )?(invalid input: )?(- )?", "", line) for line in lines]
    if (
        proc.returncode == 2
        and err
        and err[0].startswith("verl_lite: ")
        and not any(RUN_FAILURE.search(x) for x in lines)
    ):
        return "refused", " / ".join(lines)
    return "failed", f"exit {proc.returncode}: " + " | ".join(err[-4:])


def code_label() -> str:
    """The verl_lite commit the launches run on, `+changes` when the package differs from it."""
    git = ["git", "-C", ROOT]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    changed = subprocess.run(
        [*git, "status", "--porcelain", "--", "verl_lite"], capture_output=True, text=True
    )
    return (head.stdout.strip() or "unknown") + ("+changes" if changed.stdout.strip() else "")


def slug(name: str) -> str:
    """The launch's output folder: CI steps of one workflow share long prefixes, so a hash keeps them apart."""
    return re.sub(r"[^\w.-]+", "_", name)[:100] + "_" + hashlib.sha1(name.encode()).hexdigest()[:8]


SCORER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "verl_launch_scorer.py")
SCORER_EXTRAS = ("acc",)  # what verl's math scorers return beside the score, and the arith scorer lacks


def scorer_args(cfg) -> list[str]:
    """A launch whose dynamic sampling filters on a scorer extra of verl's math scorers (DAPO's `acc`)
    gets the arithmetic scorer that returns it too (scripts/verl_launch_scorer.py), unless it names a
    reward function of its own."""
    if cfg is None or not cfg.algorithm.filter_groups.enable or cfg.custom_reward_function.path:
        return []
    if cfg.algorithm.filter_groups.metric not in SCORER_EXTRAS:
        return []
    return [f"custom_reward_function.path={SCORER}", "custom_reward_function.name=compute_score"]


def run_one(
    launch, root: str, out_base: str, reward_model_dir: str, timeout: int, dry: bool, code: str = ""
) -> Outcome:
    out = os.path.join(out_base, slug(launch.after or launch.name))
    with tempfile.TemporaryDirectory(prefix="verl_launch_") as workdir:
        if launch.group == "docs-yaml":
            module, call = "verl.trainer.main_ppo", user_config_call(launch, workdir, reward_model_dir)
        else:
            recorded = recorded_call(launch, root, workdir)
            if recorded is None:  # data preparation, SFT: not a launch of the PPO trainer
                return Outcome(
                    launch.name,
                    launch.group,
                    "skipped",
                    0.0,
                    "starts no PPO trainer (verl.trainer.main_ppo or a recipe's)",
                    code,
                )
            module, call = recorded[0], recorded[1:]
        flags, args = (
            entry_config(root, module, call) if launch.group != "docs-yaml" else (call[:2], call[2:])
        )
        args = tiny_args(args, out, reward_model_dir)
        cfg = composed(flags, args)
        meaning = Meaning.of(cfg) if cfg is not None else None
        if meaning is not None and meaning.lora and (cfg.trainer.save_freq or 0) <= 0:
            args.append(
                "trainer.save_freq=1"
            )  # to see the adapter: verl saves at the last step when save_freq > 0
        args += scorer_args(cfg)
        cmd = [sys.executable, "-m", "verl_lite.main_ppo", *flags, *args]
        print(f"\n# {launch.name}\n# from {module}\n$ {shlex.join(cmd)}", flush=True)
        if dry:
            return Outcome(launch.name, launch.group, "dry", 0.0, "")
        if not launch.after and os.path.exists(out):
            subprocess.run(["rm", "-rf", out], check=True)
        before = len(metrics_rows(out))
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Outcome(
                launch.name,
                launch.group,
                "failed",
                time.monotonic() - start,
                f"timed out after {timeout} s",
                code,
            )
        seconds = time.monotonic() - start
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "launch_check.log"), "w") as f:
            f.write(f"$ {shlex.join(cmd)}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
        outcome, detail = classify(proc, out, meaning, bool(launch.after), before)
        detail = detail.replace(root, "<verl>").replace(out_base, "<runs>").replace(workdir, "<tmp>")
        print(f"-> {outcome} ({seconds:.1f} s): {detail}", flush=True)
        return Outcome(launch.name, launch.group, outcome, seconds, detail, code)


def table(outcomes: list[Outcome]) -> str:
    rows = ["| launch | outcome | time (s) | detail |", "|---|---|---|---|"]
    for o in outcomes:
        rows.append(
            f"| {o.name.replace('|', '/')} | {o.outcome} | {o.seconds:.1f} | {o.detail.replace('|', '/')[:400]} |"
        )
    counts = {k: sum(o.outcome == k for o in outcomes) for k in ("ran", "refused", "failed")}
    rows.append(
        f"\n{len(outcomes)} launches: {counts['ran']} ran, {counts['refused']} refused by name, {counts['failed']} failed"
    )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--verl", required=True, help="verl checkout or its git directory")
    parser.add_argument("--recipe", help="verl's recipe submodule (checkout or git directory)")
    parser.add_argument("--only", nargs="*", help="substrings of launch names to run")
    parser.add_argument("--group", nargs="*", choices=["examples", "ci", "docs", "docs-yaml"])
    parser.add_argument(
        "--pick", help="positions in the catalogue (--list), e.g. 0-4,7: batches under the CPU lock"
    )
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--list", action="store_true", help="list the launches and what is skipped")
    parser.add_argument("--dry", action="store_true", help="print the command lines only")
    parser.add_argument("--out", help="folder of the runs' outputs (default: a temp folder)")
    parser.add_argument("--json", help="append each outcome to this JSON-lines file")
    parser.add_argument(
        "--table-from",
        nargs="+",
        help="print docs/verl_scripts.md's tables from these JSON-lines files, the latest row of each "
        "launch winning (no runs)",
    )
    parser.add_argument(
        "--reward-model-dir", default=os.path.join(tempfile.gettempdir(), "verl_lite_tiny_rm")
    )
    opts = parser.parse_args()
    sys.path.insert(0, ROOT)
    tmp = tempfile.mkdtemp(prefix="verl_tree_")
    try:
        return check(opts, tmp)
    finally:  # the verl copy goes; the runs' outputs stay where they were written (--out or tmp/runs)
        kept = not opts.out and os.path.isdir(os.path.join(tmp, "runs"))
        shutil.rmtree(os.path.join(tmp, "verl") if kept else tmp, ignore_errors=True)


def check(opts, tmp: str) -> int:
    root = build_tree(opts.verl, opts.recipe, tmp)
    docs, notes = catalogue.docs(root)
    launches = catalogue.examples(root) + catalogue.ci(root) + docs
    if opts.table_from:
        print(verl_launch_table.tables(launches, verl_launch_table.latest(opts.table_from)))
        for path, why in catalogue.skipped(root) + notes:
            print(f"- not run: {path}: {why}")
        return 0
    if opts.list:
        for launch in launches:
            print(
                f"{launch.group:10} {launch.name}" + (f"  (resumes {launch.after})" if launch.after else "")
            )
        for path, why in catalogue.skipped(root) + notes:
            print(f"{'skipped':10} {path}: {why}")
        return 0
    chosen = [
        x
        for x in launches
        if (not opts.only or any(o in x.name for o in opts.only))
        and (not opts.group or x.group in opts.group)
    ]
    if opts.pick:
        wanted = set()
        for part in opts.pick.split(","):
            first, _, last = part.partition("-")
            wanted |= set(range(int(first), int(last or first) + 1))
        chosen = [x for i, x in enumerate(launches) if i in wanted and x in chosen]
    from tests.helpers.models import make_tiny_reward_model_dir

    make_tiny_reward_model_dir(opts.reward_model_dir)
    make_tiny_adapter_dir(opts.reward_model_dir)
    out_base = opts.out or os.path.join(tmp, "runs")
    outcomes, code = [], code_label()
    for launch in chosen:
        outcome = run_one(launch, root, out_base, opts.reward_model_dir, opts.timeout, opts.dry, code)
        outcomes.append(outcome)
        if opts.json and not opts.dry:
            with open(opts.json, "a") as f:
                f.write(json.dumps(outcome.__dict__) + "\n")
    print("\n" + table(outcomes))
    return 0 if all(o.outcome != "failed" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
