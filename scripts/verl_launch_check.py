"""Run verl's own launch scripts through verl_lite, as a verl user would, and print a table.

    python scripts/verl_launch_check.py --verl /path/to/verl [--only NAME ...] [--timeout 600]

`--verl` is a checkout of verl, or its bare git directory (read with `git show <rev>:<path>`).
Each script in SCRIPTS (verl's quickstart line and FSDP text-model examples) is run by bash with
`python`/`python3` replaced by a shell function that records its arguments, so the shell expands
the script's variables exactly as it would for verl. The recorded `key=value` arguments are kept as
written, except the ones SWAP names: model and data paths (the embedded tiny model and arithmetic
task; a tiny reward model built locally), sizes (batch sizes, lengths, micro-batches, TP, two CPU
workers on one node), one training step, no periodic validation, console logging, and the run's
output folder. The result is run as `python -m verl_lite.main_ppo ...` and classified:

- ran: exit 0 after the step;
- refused: exit 2 before Ray with one line `<key>=<value> is not supported by verl_lite: ...` (one
  such line per refused key when a script sets several);
- unknown key: exit 2 before Ray naming a key that is not in verl's config either (the column "verl
  composes it" shows whether verl's own Hydra config accepts the script's arguments);
- other: anything else (a bug to fix: a wrongly refused key, a traceback, a multi-line error).

Not part of the test suite (it needs verl's files and minutes per script); docs/verl_scripts.md
keeps the last table.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = "docs/start/quickstart.rst#ppo"
SCRIPTS = [
    QUICKSTART,
    "examples/ppo_trainer/run_deepseek7b_llm.sh",
    "examples/ppo_trainer/run_qwen2-7b_seq_balance.sh",
    "examples/ppo_trainer/run_gemma.sh",
    "examples/ppo_trainer/run_deepseek7b_llm_sp2.sh",
    "examples/ppo_trainer/run_qwen2-7b_rm_seq_balance.sh",
    "examples/ppo_trainer/run_qwen2-7b_rm_seq_balance_fused_kernels.sh",
    "examples/grpo_trainer/run_qwen2-7b.sh",
    "examples/grpo_trainer/run_qwen2-7b_math.sh",
    "examples/grpo_trainer/run_deepseek7b_llm_seq_balance.sh",
    "examples/grpo_trainer/run_qwen2-7b_seq_balance.sh",
    "examples/grpo_trainer/run_qwen2_5-3b_gsm8k_grpo_lora.sh",
    "examples/grpo_trainer/run_qwen3-8b.sh",
    "examples/gpg_trainer/run_qwen2-7b_math.sh",
    "examples/gmpo_trainer/test_dapo_7b_math.sh",
    "examples/gmpo_trainer/run_qwen2_5-7b_math.sh",
    "examples/rloo_trainer/run_qwen2-7b.sh",
    "examples/remax_trainer/run_qwen2.5-3b_seq_balance.sh",
    "examples/reinforce_plus_plus_trainer/run_qwen2-7b_math_rf.sh",
    "examples/reinforce_plus_plus_trainer/run_qwen2-7b_math_rf_baseline.sh",
    "examples/otb_trainer/run_qwen2_5-7b.sh",
    "examples/cispo_trainer/run_cispo_qwen2_5_0_5b_gsm8k.sh",
    "examples/gspo_trainer/test_gspo_3b_math.sh",
]

TINY_MODEL = "verl_lite://tiny-qwen2-arith"
ARR = "actor_rollout_ref"
WORKERS = 2
TRAIN_BATCH = 8  # prompts per step
MINI_BATCH = 4  # prompts per actor/critic update (when the script updates more than once per step)
MICRO = 2  # samples per micro-batch per worker


def swap(key: str, value: str, reward_model_dir: str) -> str | None:
    """The tiny value for `key`, or None to keep the script's value."""
    leaf = key.rsplit(".", 1)[-1]
    if key == "data.train_files":
        return "verl_lite://arith/train.parquet"
    if key == "data.val_files":
        return "verl_lite://arith/test.parquet"
    if key in (f"{ARR}.model.path", "critic.model.path", "critic.model.tokenizer_path"):
        return TINY_MODEL
    if key == "reward_model.model.path":
        return reward_model_dir
    if key == "reward_model.model.input_tokenizer":
        return TINY_MODEL  # verl: the actor's tokenizer (re-templating for the reward model)
    if key == "data.train_batch_size":
        return str(TRAIN_BATCH)
    if key == "data.gen_batch_size":  # DAPO: sample more prompts than a step trains on
        return str(2 * TRAIN_BATCH)
    if key in ("data.max_prompt_length", "data.max_response_length"):
        return "16" if "prompt" in key else "8"
    if leaf == "ppo_mini_batch_size":
        return str(MINI_BATCH)
    if leaf.endswith("micro_batch_size_per_gpu") or leaf in ("micro_batch_size", "ppo_micro_batch_size"):
        return str(MICRO)
    if leaf in ("tensor_model_parallel_size", "ulysses_sequence_parallel_size", "fsdp_size"):
        return str(min(int(value), WORKERS))  # fsdp_size=-1 (all workers) stays
    if key == "reward_model.reward_kwargs.max_resp_len":  # DAPO's overlong penalty: data's response length
        return "8"
    if key == "reward_model.reward_kwargs.overlong_buffer_cfg.len":
        return "4"  # DAPO's soft overlong penalty: a buffer inside the 8-token responses
    if key in ("trainer.n_gpus_per_node", "trainer.nnodes", "trainer.test_freq", "trainer.logger"):
        return {
            "trainer.n_gpus_per_node": str(WORKERS),
            "trainer.nnodes": "1",
            "trainer.test_freq": "-1",
        }.get(key, "console")
    if key in ("trainer.total_training_steps", "trainer.default_local_dir"):
        return ""  # set by the harness below
    return None


def script_text(verl: str, name: str) -> str:
    """The script's text; the quickstart's PPO line is the first main_ppo block of the page."""
    path = name.split("#")[0]
    if os.path.isdir(os.path.join(verl, ".git")) or os.path.isfile(os.path.join(verl, path)):
        with open(os.path.join(verl, path)) as f:
            text = f.read()
    else:
        text = subprocess.run(
            ["git", "-C", verl, "show", f"HEAD:{path}"], capture_output=True, text=True, check=True
        ).stdout
    if name != QUICKSTART:
        return text
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "verl.trainer.main_ppo" in line)
    end = next(i for i in range(start, len(lines)) if not lines[i].rstrip().endswith("\\"))
    return textwrap.dedent("\n".join(lines[start : end + 1]))


def launch_args(text: str, workdir: str) -> list[str]:
    """The arguments the script passes to `python -m verl.trainer.main_ppo`, expanded by bash."""
    record = os.path.join(workdir, "argv")
    prelude = textwrap.dedent(f"""\
        _record() {{
            case " $* " in *" verl.trainer.main_ppo "*) [ -e {record} ] || printf '%s\\0' "$@" > {record};; esac
            return 0
        }}
        python() {{ _record "$@"; }}
        python3() {{ _record "$@"; }}
        nvidia-smi() {{ return 0; }}
        huggingface-cli() {{ return 0; }}
        hf() {{ return 0; }}
        conda() {{ return 0; }}
        """)
    env = dict(os.environ, HOME=workdir, SLURM_JOB_NUM_NODES="1")
    subprocess.run(
        ["bash", "-c", prelude + text],
        cwd=workdir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )
    with open(record) as f:
        argv = f.read().split("\0")[:-1]
    module = argv.index("-m")
    return argv[module + 2 :]


def verl_composes(verl: str, args: list[str], workdir: str) -> str:
    """Whether verl's own Hydra config accepts the script's arguments (its yaml files, no verl import):
    'yes', or Hydra's first line of complaint."""
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(workdir, "verl_config")
    if os.path.isdir(os.path.join(verl, "verl", "trainer", "config")):
        config_dir = os.path.join(verl, "verl", "trainer", "config")
    else:
        os.makedirs(config_dir)
        archive = subprocess.run(
            ["git", "-C", verl, "archive", "HEAD", "verl/trainer/config"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "--strip-components=3", "-C", config_dir], input=archive, check=True)
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            compose("ppo_trainer", overrides=args)
    except Exception as e:  # Hydra's composition errors
        return str(e).splitlines()[0]
    return "yes"


def tiny_args(args: list[str], out: str, reward_model_dir: str) -> list[str]:
    kept = []
    for arg in args:
        prefix, _, rest = arg.partition("=") if "=" in arg else (arg, "", None)
        key = prefix.lstrip("+~")
        new = swap(key, rest, reward_model_dir) if rest is not None else None
        if new == "":
            continue
        kept.append(arg if new is None else f"{prefix}={new}")
    return [
        *kept,
        "trainer.total_training_steps=1",
        f"trainer.default_local_dir={out}",
        f"hydra.run.dir={out}",
    ]


NOT_SUPPORTED = "is not supported by verl_lite"
UNKNOWN_KEY = "is not a key of verl_lite's config"
SHOWN = ("actor/pg_loss", "critic/vf_loss", "actor/kl_loss", "actor/reward_kl_penalty")  # what trained


@dataclass
class Outcome:
    script: str
    outcome: str  # ran | refused | other
    seconds: float
    detail: str
    verl: str = ""  # whether verl's own config composes the script's arguments


def classify(proc: subprocess.CompletedProcess, seconds: float, script: str) -> Outcome:
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    if proc.returncode == 0:
        steps = re.findall(r"^\s*step (\d+/\d+)", proc.stdout, re.M)
        shown = [f"step {steps[-1] if steps else '?'}"]
        for metric in SHOWN:  # the console prints every metric as `name value`
            found = re.search(rf"{re.escape(metric)} (\S+)", proc.stdout)
            if found:
                shown.append(f"{metric} {found.group(1)}")
        return Outcome(script, "ran", seconds, ", ".join(shown))
    # one line, or (several refused keys) verl_lite's heading with one line per key
    problems = err[1:] if len(err) > 1 and err[0].endswith("invalid input:") else err
    if proc.returncode == 2 and problems and all(NOT_SUPPORTED in line for line in problems):
        return Outcome(script, "refused", seconds, " / ".join(line.strip(" -") for line in problems))
    if proc.returncode == 2 and len(err) == 1 and UNKNOWN_KEY in err[0]:  # see the verl column
        return Outcome(script, "unknown key", seconds, err[0])
    tail = " | ".join(err[-6:]) or proc.stdout[-600:]
    return Outcome(script, "other", seconds, f"exit {proc.returncode}: {tail}")


def run_one(
    verl: str, name: str, reward_model_dir: str, timeout: int, dry: bool = False, drop: tuple = ()
) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="verl_launch_") as workdir:
        written = [
            a
            for a in launch_args(script_text(verl, name), workdir)
            if a.split("=")[0].lstrip("+~") not in drop
        ]
        composes = verl_composes(verl, written, workdir)
        args = tiny_args(written, f"{workdir}/run", reward_model_dir)
        cmd = [sys.executable, "-m", "verl_lite.main_ppo", *args]
        print(f"\n# {name}\n$ {shlex.join(cmd)}", flush=True)
        if dry:
            return Outcome(name, "dry", 0.0, "", composes)
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Outcome(name, "other", time.monotonic() - start, f"timed out after {timeout} s", composes)
        outcome = classify(proc, time.monotonic() - start, name)
        outcome.verl = composes
        print(f"-> {outcome.outcome} ({outcome.seconds:.1f} s): {outcome.detail}", flush=True)
        return outcome


def table(outcomes: list[Outcome]) -> str:
    rows = ["| script | verl composes it | outcome | time (s) | detail |", "|---|---|---|---|---|"]
    for o in outcomes:
        detail = o.detail.replace("|", "/")[:300]
        rows.append(f"| {o.script} | {o.verl.replace('|', '/')} | {o.outcome} | {o.seconds:.1f} | {detail} |")
    counts = {k: sum(o.outcome == k for o in outcomes) for k in ("ran", "refused", "unknown key", "other")}
    rows.append(
        f"\n{counts['ran']} of {len(outcomes)} ran, {counts['refused']} refused in one line, "
        f"{counts['unknown key']} unknown key, {counts['other']} other"
    )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--verl", required=True, help="verl checkout or its git directory")
    parser.add_argument("--only", nargs="*", help="substrings of script names to run")
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--dry", action="store_true", help="print the command lines only")
    parser.add_argument(
        "--drop",
        nargs="*",
        default=[],
        help="keys whose arguments are left out (e.g. a key verl rejects too)",
    )
    parser.add_argument(
        "--reward-model-dir", default=os.path.join(tempfile.gettempdir(), "verl_lite_tiny_rm")
    )
    opts = parser.parse_args()
    sys.path.insert(0, ROOT)
    from tests.helpers.models import make_tiny_reward_model_dir

    make_tiny_reward_model_dir(opts.reward_model_dir)
    names = [s for s in SCRIPTS if not opts.only or any(o in s for o in opts.only)]
    outcomes = [
        run_one(opts.verl, name, opts.reward_model_dir, opts.timeout, opts.dry, tuple(opts.drop))
        for name in names
    ]
    print("\n" + table(outcomes))
    return 0 if all(o.outcome != "other" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
