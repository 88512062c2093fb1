"""Start-up: everything about a run that can be known before its workers start, resolved and
checked in one place. The rules live next to their components; this module only registers them
and says when each applies. Bad input stops the run with one ConfigError listing every problem of
the phase, one line each (the key or file and row, the value, the fix); main_ppo prints it and
exits 2, before Ray.

    build_config (config/compose.py)  composed, verl's '+' spellings, support table, resolved
    prepare(cfg, links=...)           verl's placeholder paths (alone: one message), then
        VALUES                        the config as written, before anything is derived
        RESOLVE                       fills derived values (assets, verl's derivations, rollout)
        CHECKS                        the resolved config: components, files, models, machine
    (main_ppo loads the tokenizer)
    check_tokenizer(cfg, run, tok)    TOKENIZER: the loaded tokenizer against the models
    (main_ppo loads the datasets)
    check_datasets(cfg, run, t, v)    DATASETS: the loaded datasets
    (main_ppo starts or joins Ray; RayPPOTrainer vets the checkpoint to resume from)
    check_cluster(cfg)                CLUSTER: a joined cluster's nodes, before any worker
    freeze (config/freeze.py)         in RayPPOTrainer.init_workers, after trainer.auto_offload's
                                      choice, before any worker is built

Adding a check: write `fn(cfg, run[, loaded...]) -> list[str]` next to its component (in
<component>/checks.py) and add one `Step("name", "verl_lite.<component>.checks:fn")` line to its
phase. Steps name their function as "module:function", imported when the step runs, so that
importing this module costs nothing: main_ppo runs `check_early` (the placeholder paths and VALUES)
before torch, transformers and Ray are imported, and a refused value is reported in about a second. `run` (config/run.py) says
what the config amounts to (world, roles, GPUs, linked keys), so no step re-derives it. A step
marked `needs_clean` runs only when the steps before it in its phase found nothing (it assumes sane
values, or reads files the earlier steps vouch for).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from verl_lite.config.errors import ConfigError
from verl_lite.config.run import Run

if TYPE_CHECKING:
    from verl_lite.config.schema import PPOTrainerConfig

__all__ = [
    "joins_cluster",
    "check_early",
    "prepare",
    "check",
    "check_tokenizer_fit",
    "check_datasets",
    "check_cluster",
]


@dataclass(frozen=True)
class Step:
    name: str
    fn: str  # "module:function": (cfg, run, *what the phase has loaded) -> one line per problem
    needs_clean: bool = False

    def function(self) -> Callable[..., list[str]]:
        module, name = self.fn.split(":")
        return getattr(importlib.import_module(module), name)


VALUES: list[Step] = [
    Step("value domains", "verl_lite.config.domains:check_values"),
]

RESOLVE: list[Step] = [
    Step("embedded assets and ~ in paths", "verl_lite.preflight:resolve_paths"),
    Step("verl's derived values", "verl_lite.preflight:derive_values"),
    Step("rollout", "verl_lite.rollout.checks:resolve_rollout"),
]

CHECKS: list[Step] = [
    Step("values together", "verl_lite.config.validate:check_relations"),
    Step("memory levers", "verl_lite.config.validate_levers:check_lever_values"),
    Step("rollout", "verl_lite.rollout.checks:check_rollout"),
    Step("engines", "verl_lite.engine.checks:check_engines"),
    Step("LoRA", "verl_lite.workers.lora_checks:check_lora"),
    Step("algorithm", "verl_lite.algos.checks:check_algorithm"),
    Step("reward", "verl_lite.reward.checks:check_reward"),
    Step("data", "verl_lite.data.checks:check_data"),
    Step("multi-turn rollouts", "verl_lite.agent_loop.checks:check_multi_turn"),
    Step("trainer", "verl_lite.trainer.checks:check_trainer"),
    Step("models", "verl_lite.workers.checks:check_models"),
    # workers the machine cannot host make the geometry moot
    Step("machine", "verl_lite.single_controller.checks:check_machine"),
    Step("batch geometry", "verl_lite.config.validate:check_batch_geometry", needs_clean=True),
    Step("critic batch geometry", "verl_lite.config.validate:check_critic_geometry", needs_clean=True),
    Step("model positions", "verl_lite.workers.checks:check_positions", needs_clean=True),
    Step(
        "sequence parallelism vs attention heads",
        "verl_lite.workers.checks:check_lever_heads",
        needs_clean=True,
    ),
    Step("vLLM engine arguments", "verl_lite.rollout.checks:check_vllm_engine", needs_clean=True),
]

TOKENIZER: list[Step] = [
    Step("tokenizer", "verl_lite.workers.checks:check_tokenizer"),  # (cfg, run, tokenizer)
]

DATASETS: list[Step] = [
    Step("a batch fits the data", "verl_lite.data.checks:check_batch"),  # (cfg, run, train, val)
    Step("a scorer for every data_source", "verl_lite.reward.checks:check_scorers"),
    Step("agent loops of the rows", "verl_lite.agent_loop.checks:check_agent_rows"),
]

CLUSTER: list[Step] = [
    Step("the cluster's nodes", "verl_lite.single_controller.checks:check_cluster"),
]


def resolve_paths(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    from verl_lite.data.assets import resolve_config_paths

    return resolve_config_paths(cfg)


def derive_values(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    from verl_lite.config.normalize import normalize

    return normalize(cfg)


def run_phase(steps: list[Step], cfg: PPOTrainerConfig, run: Run, *loaded) -> None:
    """Every step of a phase; ConfigError listing all their problems."""
    problems: list[str] = []
    for step in steps:
        if step.needs_clean and problems:
            continue
        problems += step.function()(cfg, run, *loaded)
    if problems:
        raise ConfigError(problems)


def joins_cluster(cfg: PPOTrainerConfig) -> bool:
    from verl_lite.single_controller.checks import joins_cluster as joins

    return joins(cfg)


def _run_of(cfg: PPOTrainerConfig, num_gpus: int | None, links: dict[str, str] | None) -> Run:
    from verl_lite.roles import run_of
    from verl_lite.utils import device as dev

    run = run_of(cfg, dev.num_visible_gpus() if num_gpus is None else num_gpus)
    return replace(run, links=dict(links or {}))


def _placeholders(cfg: PPOTrainerConfig, num_gpus: int | None, links) -> Run | None:
    """verl's placeholder paths (verl's defaults, not a user's mistakes): this one message only. The
    roles (which decide whether the critic's path counts) are worked out only when a path is one."""
    from verl_lite.trainer.placeholders import check_placeholders, may_hold_placeholders

    if not may_hold_placeholders(cfg):
        return None
    run = _run_of(cfg, num_gpus, links)
    placeholders = check_placeholders(cfg, run)
    if placeholders:
        raise ConfigError(placeholders)
    return run


def check_early(cfg: PPOTrainerConfig, links: dict[str, str] | None = None) -> None:
    """The placeholder paths and VALUES, needing no component: main_ppo runs this before importing
    torch, transformers and Ray. The values' steps need only the links of the Run."""
    _placeholders(cfg, None, links)
    links_only = Run(world=0, critic=False, ref=False, reward_model=False, num_gpus=0, use_gpu=False)
    run_phase(VALUES, cfg, replace(links_only, links=dict(links or {})))


def check(cfg: PPOTrainerConfig, run: Run) -> None:
    """The CHECKS phase alone (on a config already resolved)."""
    run_phase(CHECKS, cfg, run)


def prepare(cfg: PPOTrainerConfig, num_gpus: int | None = None, links: dict[str, str] | None = None) -> Run:
    """Resolve and check `cfg` in place; the Run it amounts to. `num_gpus`: GPUs visible (default:
    here); `links`: the composed config's `${...}` links (config/domains.linked_keys)."""
    run = _placeholders(cfg, num_gpus, links) or _run_of(cfg, num_gpus, links)
    for phase in (VALUES, RESOLVE, CHECKS):
        run_phase(phase, cfg, run)
    return run


def check_tokenizer_fit(cfg: PPOTrainerConfig, run: Run, tokenizer) -> None:
    run_phase(TOKENIZER, cfg, run, tokenizer)


def check_datasets(cfg: PPOTrainerConfig, run: Run, train, val) -> None:
    run_phase(DATASETS, cfg, run, train, val)


def check_cluster(cfg: PPOTrainerConfig) -> None:
    """Right after joining a Ray cluster (or finding one running), before any worker starts."""
    run_phase(CLUSTER, cfg, _run_of(cfg, None, None))
