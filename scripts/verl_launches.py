"""The launches scripts/verl_launch_check.py runs: verl's own launch lines, each with the environment it runs in.

Read from a verl checkout (or its git directory) and its recipe submodule, not written down here, so
the catalogue follows verl:

- examples: the quickstart's PPO line and the FSDP text-model scripts of examples/ (verl 0.7: the ones
  docs/verl_scripts.md lists why it picked; verl 0.9: every examples/*/run_*_fsdp.sh and examples/tuning/*/run_*_fsdp.sh of a text model);
  run with their defaults;
- ci: every step of verl's .github/workflows (stash/ included) that runs a tests/special_e2e script,
  with the environment the step and its job set (`KEY=value bash tests/special_e2e/...`, `export`,
  the job's `env:`); the scripts of tests/special_e2e no workflow runs, with their defaults;
- docs: every `bash <script> [args]` of a fenced block in docs/algo/*.md (recipe scripts from the
  recipe submodule), and every YAML block there that sets trainer keys, run as a user config file
  (`defaults: [ppo_trainer, _self_]` plus the block) with --config-path/--config-name.

Lines that do not start a PPO trainer (data preparation, SFT, generation, Megatron-only steps) are in
`SKIPPED` with the reason.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field

import yaml

RECIPE = "recipe"  # verl's submodule (verl-project/verl-recipe)
QUICKSTART = "docs/start/quickstart.rst#ppo"
EXAMPLES = [
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
E2E = "tests/special_e2e/"
NOT_FSDP = {  # tests/special_e2e files that start no FSDP PPO run, and why
    "run_ppo_trainer_megatron.sh": "Megatron",
    "run_ppo_trainer_torchtitan.sh": "TorchTitan engine, not FSDP",
    "run_ppo_trainer_veomni.sh": "VeOmni engine, not FSDP",
    "run_ppo_trainer_fsdp_turbo.sh": "FSDP turbo engine (out of scope)",
    "sft/": "SFT trainer, not PPO",
    "generation/": "generation only (main_generation), no training",
    "run_test.sh": "a wrapper: runs `main_ppo --config-name $1`; no workflow calls it",
}
MEGATRON_ENV = {"ACTOR_STRATEGY": "megatron"}  # the FSDP-or-Megatron scripts' Megatron jobs


@dataclass(frozen=True)
class Launch:
    name: str  # the table's row
    path: str  # the script (or page) in the verl checkout; recipe scripts under recipe/
    group: str  # examples | ci | docs | docs-yaml
    env: dict = field(default_factory=dict)  # what the CI step sets
    args: tuple[str, ...] = ()  # arguments after the script (docs: `bash run_gemma.sh key=value ...`)
    after: str = ""  # a step that resumes the named step's checkpoint (its output folder)
    yaml_text: str = ""  # docs-yaml: the block


def read(verl: str, path: str) -> str:
    """A file of the checkout, or of its git directory at HEAD (the recipe at the submodule's commit)."""
    if os.path.isfile(os.path.join(verl, path)):
        with open(os.path.join(verl, path)) as f:
            return f.read()
    return subprocess.run(
        ["git", "-C", verl, "show", f"HEAD:{path}"], capture_output=True, text=True, check=True
    ).stdout


def ls(verl_root: str, prefix: str) -> list[str]:
    out = []
    for folder, _, files in os.walk(os.path.join(verl_root, prefix)):
        out += [os.path.relpath(os.path.join(folder, f), verl_root) for f in files]
    return sorted(out)


# verl 0.9's examples: examples/<algorithm>/run_<model>_fsdp.sh, one per algorithm and model, and
# examples/tuning/<topic>/ (LoRA: from an adapter, lora.merge; scaling); the text-model FSDP ones run
# (not the vision-language, video, turbo-engine or distillation scripts)
EXAMPLES_09 = re.compile(r"^examples/(tuning/)?[^/]+/run_[^/]*_fsdp(_multi_rs)?\.sh$")
NOT_TEXT_FSDP = re.compile(r"vl_|_vl|video|glm4_1v|minicpm_o|openr1|turbo|distillation|ascend|megatron")


def examples(verl_root: str | None = None) -> list[Launch]:
    """verl 0.7's picked examples present in the checkout, and verl 0.9's FSDP text-model scripts."""
    present = [
        p for p in EXAMPLES if verl_root is None or os.path.isfile(os.path.join(verl_root, p.split("#")[0]))
    ]
    found = (
        [p for p in ls(verl_root, "examples") if EXAMPLES_09.match(p) and not NOT_TEXT_FSDP.search(p)]
        if verl_root
        else []
    )
    return [Launch(p, p.split("#")[0], "examples") for p in [*present, *found]]


def _steps(workflow: dict):
    """(job name, step name, job env, run text) of every step."""
    for job_name, job in (workflow.get("jobs") or {}).items():
        env = {k: str(v) for k, v in (job.get("env") or {}).items() if "${{" not in str(v)}
        for step in job.get("steps") or []:
            if isinstance(step, dict) and "run" in step:
                yield job_name, step.get("name", ""), env, step["run"]


def _commands(run: str):
    """(env, script) of each `[KEY=value ...] bash tests/special_e2e/...` line, `export`s included."""
    exported: dict[str, str] = {}
    for line in re.sub(r"\\\n\s*", " ", run).splitlines():
        line = line.strip()
        if line.startswith("#") or not line:
            continue
        try:
            words = shlex.split(line)
        except ValueError:  # a line that continues a multi-line string (verl 0.9's workflows): no launch
            continue
        if not words:
            continue
        if words[0] == "export":
            exported.update(w.split("=", 1) for w in words[1:] if "=" in w)
            continue
        env = {}
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            key, value = words.pop(0).split("=", 1)
            env[key] = value
        if words[:1] == ["bash"] and len(words) > 1 and words[1].startswith(E2E):
            yield {**exported, **env}, words[1]


def ci(verl_root: str) -> list[Launch]:
    """One launch per CI step running a special_e2e script; a script no step runs, with its defaults."""
    launches, seen = [], set()
    workflows = [p for p in ls(verl_root, ".github/workflows") if p.endswith((".yml", ".yaml"))]
    for wf in workflows:
        with open(os.path.join(verl_root, wf)) as f:
            workflow = yaml.safe_load(f)
        for job, step, job_env, run in _steps(workflow):
            for env, script in _commands(run):
                seen.add(script)
                env = {**job_env, **env}
                if _not_fsdp(script) or all(env.get(k) == v for k, v in MEGATRON_ENV.items()):
                    continue
                after = ""
                if env.get("RESUME_MODE") == "auto":  # resumes the step that saved under the same name
                    after = next(
                        (
                            x.name
                            for x in reversed(launches)
                            if x.env.get("VERL_EXP_NAME") == env.get("VERL_EXP_NAME")
                        ),
                        "",
                    )
                name = f"{script.removeprefix(E2E)} [{os.path.basename(wf)}: {step or job}]"
                launches.append(Launch(name, script, "ci", env, after=after))
    for script in ls(verl_root, E2E):
        if script.endswith(".sh") and script not in seen and not _not_fsdp(script):
            launches.append(
                Launch(f"{script.removeprefix(E2E)} [no workflow runs it: its defaults]", script, "ci")
            )
    return launches


def _not_fsdp(script: str) -> str:
    rest = script.removeprefix(E2E)
    return next((why for key, why in NOT_FSDP.items() if rest.startswith(key) or rest == key), "")


def skipped(verl_root: str) -> list[tuple[str, str]]:
    """special_e2e scripts that start no FSDP PPO run, with the reason."""
    return [(s, _not_fsdp(s)) for s in ls(verl_root, E2E) if s.endswith(".sh") and _not_fsdp(s)]


def _fenced(text: str, lang: str = "") -> list[str]:
    return re.findall(rf"```{lang}[^\n]*\n(.*?)```", text, re.S)


def _resolve(verl_root: str, script: str) -> str | None:
    """A docs page's script path in the checkout: as written, else the one file of that name."""
    if os.path.isfile(os.path.join(verl_root, script)):
        return script
    matches = [
        p
        for p in ls(verl_root, "examples") + ls(verl_root, RECIPE)
        if os.path.basename(p) == os.path.basename(script)
    ]
    return matches[0] if len(matches) == 1 else None


def docs(verl_root: str) -> tuple[list[Launch], list[tuple[str, str]]]:
    """docs/algo/*.md: `bash <script> [args]` lines, and YAML blocks that set trainer keys."""
    launches, notes = [], []
    for page in ls(verl_root, "docs/algo"):
        if not page.endswith(".md"):
            continue
        with open(os.path.join(verl_root, page)) as f:
            text = f.read()
        for block in _fenced(text):
            # an indented key=value line under a `bash x.sh` line is one of its arguments (ppo.md writes
            # `bash run_gemma.sh` and then its overrides, one per line)
            block = re.sub(r"\.sh[ \t]*\n(?=[ \t]+\S+=)", ".sh \\\n", block)
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                words = shlex.split(line.split("#")[0]) if line.strip().startswith("bash ") else []
                if len(words) < 2 or not words[1].endswith(".sh"):
                    continue
                path = _resolve(verl_root, words[1])
                label = f"{page.removeprefix('docs/algo/')}: `{' '.join(words[:2])}`" + (
                    " + args" if words[2:] else ""
                )
                if path is None:
                    notes.append((label, f"no {words[1]} in verl or its recipe submodule"))
                else:
                    launches.append(Launch(f"{label} -> {path}", path, "docs", args=tuple(words[2:])))
        for i, block in enumerate(_fenced(text, "ya?ml")):
            try:
                values = yaml.safe_load(block)
            except yaml.YAMLError:
                continue
            if isinstance(values, dict) and set(values) & {
                "algorithm",
                "actor_rollout_ref",
                "data",
                "critic",
            }:
                name = f"{page.removeprefix('docs/algo/')}: YAML block {i + 1} as a user config"
                launches.append(Launch(name, page, "docs-yaml", yaml_text=block))
    return launches, notes
