"""How scripts/verl_launch_check.py turns one of verl's launch lines into a tiny verl_lite command.

The verl tree (verl at HEAD, its recipe submodule at the pinned commit) is built once as plain files;
a script runs there under bash with `python`/`python3` (and `ray job submit ... --`) replaced by a
function that records its trainer call, so the shell expands the script's variables as for verl. An
entry module other than verl's main_ppo (a recipe's, verl's experimental trainers) becomes
verl_lite.main_ppo with that module's own config file as a user config (--config-path/--config-name,
the recipe layout). `tiny_args` then swaps paths and sizes only: the embedded tiny model and data,
8 prompts per step with the script's number of mini-batches per step, micro-batches that divide them,
prompt/response 16/8 tokens, TP and sequence-parallel sizes at most 2, two CPU workers on one node
(added where the line leaves verl's default of 8 GPUs per node), one step, console and file logging, the output folder. A docs YAML block becomes a user's config file
with the same swaps.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import textwrap
from dataclasses import dataclass

import verl_launches as catalogue

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_MODEL = "verl_lite://tiny-qwen2-arith"
ARR = "actor_rollout_ref"
WORKERS, TRAIN_BATCH, MICRO = 2, 8, 2
VERL = {"data.train_batch_size": 1024, f"{ARR}.actor.ppo_mini_batch_size": 256, f"{ARR}.rollout.n": 1}
# the trainer entry modules a script may start (a POSIX regex: bash matches it)
ENTRY = r"^(verl\.trainer\.main_ppo|recipe\.[A-Za-z0-9_]+\.main_[A-Za-z0-9_]+|verl\.experimental\.[A-Za-z0-9_.]+)$"


def build_tree(verl: str, recipe: str | None, into: str) -> str:
    """verl at HEAD with its recipe submodule at the pinned commit, as plain files under `into`."""
    root = os.path.join(into, "verl")
    os.makedirs(root)
    archive = subprocess.run(["git", "-C", verl, "archive", "HEAD"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", root], input=archive, check=True)
    pinned = subprocess.run(
        ["git", "-C", verl, "ls-tree", "HEAD", catalogue.RECIPE], capture_output=True, text=True, check=True
    ).stdout.split()
    recipe = recipe or os.path.join(verl, catalogue.RECIPE)
    if pinned and os.path.exists(recipe):
        archive = subprocess.run(
            ["git", "-C", recipe, "archive", pinned[2]], capture_output=True, check=True
        ).stdout
        os.makedirs(os.path.join(root, catalogue.RECIPE), exist_ok=True)
        subprocess.run(["tar", "-x", "-C", os.path.join(root, catalogue.RECIPE)], input=archive, check=True)
    return root


PRELUDE = """\
_record() {{
    local m="" prev="" entry={entry}
    for a in "$@"; do [ "$prev" = "-m" ] && m="$a"; prev="$a"; done
    if [[ "$m" =~ $entry ]] && [ ! -e {record} ]; then printf '%s\\0' "$@" > {record}; fi
    return 0
}}
_python() {{ [ "$1" = "-c" ] && return 1; _record "$@"; }}  # a `-c` probe (import torch_npu): no NPU here
python() {{ _python "$@"; }}
python3() {{ _python "$@"; }}
uv() {{ _record "$@"; }}  # verl 0.9's `uv run ... python3 -m verl.trainer.main_ppo`
ulimit() {{ return 0; }}  # verl 0.9's scripts raise the open-files limit
ray() {{ while [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done; [ $# -gt 0 ] && shift && "$@"; return 0; }}
nvidia-smi() {{ return 0; }}
huggingface-cli() {{ return 0; }}
hf() {{ return 0; }}
conda() {{ return 0; }}
pip() {{ return 0; }}
wget() {{ return 0; }}
rm() {{ return 0; }}  # a script may delete what it wrote for its trainer (a reward function) once the call returns
curl() {{ return 0; }}
# a script that hands over to another (`exec bash run_v1_separate_async.sh "${{params[@]}}"`): the
# child bash inherits the stand-ins
export -f _record _python python python3 uv ulimit ray nvidia-smi huggingface-cli hf conda pip wget rm curl
"""


def recorded_call(launch, root: str, workdir: str) -> list[str] | None:
    """The trainer call the launch makes (module and arguments), expanded by bash; None if none."""
    record = os.path.join(workdir, "argv")
    if launch.group == "examples" and launch.name == catalogue.QUICKSTART:
        lines = catalogue.read(root, launch.path).splitlines()
        start = next(i for i, line in enumerate(lines) if "verl.trainer.main_ppo" in line)
        end = next(i for i in range(start, len(lines)) if not lines[i].rstrip().endswith("\\"))
        text = textwrap.dedent("\n".join(lines[start : end + 1]))
    else:  # sourced, so the script's BASH_SOURCE[0] is its path (verl 0.9's find their checkout by it)
        text = 'source "$0" "$@"'
    prelude = PRELUDE.format(entry=shlex.quote(ENTRY), record=shlex.quote(record))
    # VERL_USE_UV=0: verl 0.9's scripts' own switch to the system python (no uv here); DEVICE=gpu: their
    # GPU branch (they probe `import torch_npu` otherwise), whose workers are CPU processes here. These
    # and HOME (the run's temp folder, where $HOME/data and $HOME/models point) win over a CI job's env
    # (ROCm's sets HOME)
    fixed = {"HOME": workdir, "SLURM_JOB_NUM_NODES": "1", "VERL_USE_UV": "0", "DEVICE": "gpu"}
    # a script that must be given a saved adapter (verl 0.9's tuning/lora/*from_adapter*) gets one;
    # its lora_adapter_path is then swapped for the tiny model's (adapter_dir)
    env = {**os.environ, "LORA_ADAPTER_PATH": "lora_adapter", **launch.env, **fixed}
    subprocess.run(
        ["bash", "-c", prelude + text, launch.path, *launch.args],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )
    if not os.path.exists(record):
        return None
    with open(record) as f:
        argv = f.read().split("\0")[:-1]
    return argv[argv.index("-m") + 1 :]


def hydra_main(root: str, module: str) -> tuple[str, str]:
    """(config folder, config name) of an entry module's @hydra.main."""
    path = os.path.join(root, *module.split(".")) + ".py"
    source = open(path).read()
    found = re.search(r"@hydra\.main\(([^)]*)\)", source)
    spec = dict(
        re.findall(r"(config_path|config_name)\s*=\s*[\"']([^\"']*)[\"']", found.group(1) if found else "")
    )
    return os.path.join(os.path.dirname(path), spec.get("config_path", "config")), spec.get("config_name", "")


def entry_config(root: str, module: str, args: list[str]) -> tuple[list[str], list[str]]:
    """verl_lite's config flags for the call, and its other arguments. verl's main_ppo is verl_lite's;
    another entry module's config (its @hydra.main, or the call's --config-path/--config-name, relative
    to the module's folder as Hydra reads it) is given as a user config."""
    flags, rest, it = {}, [], iter(args)
    for a in it:
        for flag in ("--config-path", "--config-name", "-cp", "-cn"):
            if a == flag:
                flags[flag.lstrip("-").replace("cp", "config-path").replace("cn", "config-name")] = next(it)
                break
            if a.startswith(flag + "="):
                flags[flag.lstrip("-").replace("cp", "config-path").replace("cn", "config-name")] = a.split(
                    "=", 1
                )[1]
                break
        else:
            rest.append(a)
    if module == "verl.trainer.main_ppo":
        base = os.path.join(root, "verl", "trainer")
        folder = flags.get("config-path")
        out = [f"--config-path={os.path.join(base, folder)}"] if folder else []
        return out + ([f"--config-name={flags['config-name']}"] if "config-name" in flags else []), rest
    folder, name = hydra_main(root, module)
    if "config-path" in flags:
        folder = os.path.join(os.path.dirname(folder), flags["config-path"])
    return [
        f"--config-path={os.path.normpath(folder)}",
        f"--config-name={flags.get('config-name', name)}",
    ], rest


def _int(value, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


@dataclass
class Sizes:
    """The tiny sizes for one call: its number of mini-batches per step kept."""

    mini: int
    micro: int

    @classmethod
    def of(cls, args: list[str]) -> Sizes:
        given = {a.split("=", 1)[0].lstrip("+"): a.split("=", 1)[1] for a in args if "=" in a}
        train = _int(given.get("data.train_batch_size"), VERL["data.train_batch_size"])
        mini = _int(given.get(f"{ARR}.actor.ppo_mini_batch_size"), VERL[f"{ARR}.actor.ppo_mini_batch_size"])
        n = _int(given.get(f"{ARR}.rollout.n"), VERL[f"{ARR}.rollout.n"])
        per_step = max(1, train // mini) if mini > 0 and train % mini == 0 else 2
        tiny_mini = max(1, TRAIN_BATCH // per_step)
        while tiny_mini * max(n, 1) % WORKERS and tiny_mini < TRAIN_BATCH:  # every worker gets responses
            tiny_mini *= 2
        local = tiny_mini * max(n, 1) // WORKERS
        return cls(tiny_mini, MICRO if local % MICRO == 0 else 1)


def adapter_dir(reward_model_dir: str) -> str:
    """The tiny model's saved LoRA adapter, beside the tiny reward model (make_tiny_adapter_dir)."""
    return reward_model_dir.rstrip("/") + "_lora_adapter"


def make_tiny_adapter_dir(reward_model_dir: str) -> str:
    """A PEFT adapter folder for the tiny model (rank 8 on every linear, B moved off zero so it is not
    the base), for launches that continue from a saved adapter."""
    import torch
    from transformers import AutoModelForCausalLM

    from verl_lite.data import assets
    from verl_lite.engine.lora import adapter_file_state, apply_lora, save_adapter
    from verl_lite.engine.lora_spec import LoraSpec

    path = adapter_dir(reward_model_dir)
    if os.path.exists(os.path.join(path, "adapter_config.json")):
        return path
    model_path = assets.resolve(TINY_MODEL)
    spec = LoraSpec("model", "causal_lm", 8, 16, "all-linear", None, None, model_path)
    model = apply_lora(AutoModelForCausalLM.from_pretrained(model_path), spec)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.normal_(std=0.01, generator=torch.Generator().manual_seed(0))
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    save_adapter(path, adapter_file_state(model, trained), model.peft_config["default"])
    return path


def swap(key: str, value: str, sizes: Sizes, reward_model_dir: str) -> str | None:
    """The tiny value for `key`, '' to drop it, or None to keep the script's value."""
    leaf = key.rsplit(".", 1)[-1]
    paths = {
        "data.train_files": "verl_lite://arith/train.parquet",
        "data.val_files": "verl_lite://arith/test.parquet",
        f"{ARR}.model.path": TINY_MODEL,
        "critic.model.path": TINY_MODEL,
        "critic.model.tokenizer_path": TINY_MODEL,
        "reward_model.model.path": reward_model_dir,
        "reward_model.model.input_tokenizer": TINY_MODEL,  # verl: the actor's tokenizer
        "reward.reward_model.model_path": reward_model_dir,  # verl 0.9's spelling
        f"{ARR}.model.lora_adapter_path": adapter_dir(reward_model_dir),  # a saved adapter to continue
    }
    if key == "ray_kwargs.ray_init.runtime_env.py_executable" and value.startswith("uv"):
        return "null"  # verl 0.9's uv launcher's interpreter: without uv (as here), verl's own null
    if key in paths:
        return paths[key]
    sizes_by_key = {
        "data.train_batch_size": TRAIN_BATCH,
        "data.gen_batch_size": 2 * TRAIN_BATCH,  # DAPO draws more prompts than a step trains on
        "data.val_batch_size": "null",
        "data.max_prompt_length": 16,
        "data.max_response_length": 8,
        "reward_model.reward_kwargs.max_resp_len": 8,  # DAPO's overlong penalty: the response length
        "reward_model.reward_kwargs.overlong_buffer_cfg.len": 4,
        "reward_model.overlong_buffer.len": 4,
        "reward.reward_kwargs.max_resp_len": 8,  # verl 0.9's spellings of the two above
        "reward.reward_kwargs.overlong_buffer_cfg.len": 4,
        "trainer.n_gpus_per_node": WORKERS,
        "trainer.nnodes": 1,
        "trainer.test_freq": -1,
        "trainer.device": "auto",  # verl's CI scripts say cuda: the workers here are CPU processes
    }
    if key in sizes_by_key:
        return str(sizes_by_key[key])
    if leaf == "ppo_mini_batch_size":
        return str(sizes.mini)
    if leaf.endswith("micro_batch_size_per_gpu") or leaf.endswith("micro_batch_size"):
        micro = sizes.micro if leaf.startswith("ppo_micro") else MICRO
        return str(micro if leaf.endswith("_per_gpu") else micro * WORKERS)  # deprecated: a global size
    if key == f"{ARR}.rollout.n_gpus_per_node":  # separate_async's rollout group: as many as the trainer's
        return str(min(_int(value, WORKERS), WORKERS))
    if leaf in ("tensor_model_parallel_size", "ulysses_sequence_parallel_size", "fsdp_size"):
        return str(min(_int(value, 1), WORKERS))  # fsdp_size=-1 (all workers) stays
    if key in (
        "trainer.total_training_steps",
        "trainer.default_local_dir",
        "trainer.logger",
        "hydra.run.dir",
    ):
        return ""  # the harness's own, below
    return None


PLACEMENT = ("trainer.n_gpus_per_node", "trainer.nnodes")  # 2 workers on 1 node, set or not


def tiny_args(args: list[str], out: str, reward_model_dir: str) -> list[str]:
    sizes, kept = Sizes.of(args), []
    for arg in args:
        prefix, _, rest = arg.partition("=") if "=" in arg else (arg, "", None)
        new = swap(prefix.lstrip("+~"), rest, sizes, reward_model_dir) if rest is not None else None
        if new != "":
            kept.append(arg if new is None else f"{prefix}={new}")
    given = {a.split("=", 1)[0].lstrip("+~") for a in args}
    return [
        *kept,
        *(f"{k}={swap(k, '', sizes, reward_model_dir)}" for k in PLACEMENT if k not in given),
        "trainer.total_training_steps=1",
        "trainer.logger=[console,file]",
        f"trainer.default_local_dir={out}",
        f"hydra.run.dir={out}",
    ]


def flatten(values: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in values.items():
        if isinstance(value, dict) and value:
            out |= flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def nest(flat: dict) -> dict:
    out: dict = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def user_config_call(launch, workdir: str, reward_model_dir: str) -> list[str]:
    """docs-yaml: the block as a user's config file (verl's recipe layout, its sizes and paths swapped in
    the file); the flags and the paths and sizes the block leaves out, as a launch line would give them."""
    import yaml

    flat = flatten(yaml.safe_load(launch.yaml_text))
    sizes = Sizes.of([f"{k}={v}" for k, v in flat.items()])
    for key, value in list(flat.items()):
        new = swap(key, str(value), sizes, reward_model_dir)
        if new == "":
            del flat[key]
        elif new is not None:
            flat[key] = yaml.safe_load(new)
    folder = os.path.join(workdir, "user_config")
    os.makedirs(folder)
    head = {"hydra": {"searchpath": ["file://verl/trainer/config"]}, "defaults": ["ppo_trainer", "_self_"]}
    with open(os.path.join(folder, "from_docs.yaml"), "w") as f:
        yaml.safe_dump(head, f, sort_keys=False)
        yaml.safe_dump(nest(flat), f, sort_keys=False)
    given = {k for k in flat}
    base = {
        "data.train_files": "",
        "data.val_files": "",
        f"{ARR}.model.path": "",
        "critic.model.path": "",
        "data.train_batch_size": "",
        "data.max_prompt_length": "",
        "data.max_response_length": "",
        f"{ARR}.actor.ppo_mini_batch_size": "",
        f"{ARR}.actor.ppo_micro_batch_size_per_gpu": "",
        f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu": "",
        f"{ARR}.ref.log_prob_micro_batch_size_per_gpu": "",
        "critic.ppo_micro_batch_size_per_gpu": "",
        "trainer.n_gpus_per_node": "",
        "trainer.nnodes": "",
    }
    args = [f"{k}={swap(k, '1', sizes, reward_model_dir)}" for k in base if k not in given]
    return [f"--config-path={folder}", "--config-name=from_docs", *args]
