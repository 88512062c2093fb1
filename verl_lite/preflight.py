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
<component>/checks.py) and add one `Step("name", fn)` line to its phase. `run` (config/run.py) says
what the config amounts to (world, roles, GPUs, linked keys), so no step re-derives it. A step
marked `needs_clean` runs only when the steps before it in its phase found nothing (it assumes sane
values, or reads files the earlier steps vouch for).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from verl_lite.algos.checks import check_algorithm
from verl_lite.config import domains, normalize, validate, validate_levers
from verl_lite.config.errors import ConfigError
from verl_lite.config.run import Run
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.data.assets import resolve_config_paths
from verl_lite.data.checks import check_batch, check_data
from verl_lite.engine.checks import check_engines
from verl_lite.reward.checks import check_reward, check_scorers
from verl_lite.roles import run_of
from verl_lite.rollout.checks import check_rollout, check_vllm_engine, resolve_rollout
from verl_lite.single_controller.checks import check_cluster as cluster_problems
from verl_lite.single_controller.checks import check_machine, joins_cluster
from verl_lite.trainer.checks import check_placeholders, check_trainer
from verl_lite.utils import device as dev
from verl_lite.workers.checks import check_lever_heads, check_models, check_positions, check_tokenizer
from verl_lite.workers.lora_checks import check_lora

__all__ = ["joins_cluster", "prepare", "check", "check_tokenizer_fit", "check_datasets", "check_cluster"]


@dataclass(frozen=True)
class Step:
    name: str
    fn: Callable[..., list[str]]  # (cfg, run, *what the phase has loaded) -> one line per problem
    needs_clean: bool = False


VALUES: list[Step] = [
    Step("value domains", domains.check_values),
]

RESOLVE: list[Step] = [
    Step("embedded assets and ~ in paths", lambda cfg, run: resolve_config_paths(cfg)),
    Step("verl's derived values", lambda cfg, run: normalize.normalize(cfg)),
    Step("rollout", resolve_rollout),
]

CHECKS: list[Step] = [
    Step("values together", validate.check_relations),
    Step("memory levers", validate_levers.check_lever_values),
    Step("rollout", check_rollout),
    Step("engines", check_engines),
    Step("LoRA", check_lora),
    Step("algorithm", check_algorithm),
    Step("reward", check_reward),
    Step("data", check_data),
    Step("trainer", check_trainer),
    Step("models", check_models),
    Step("machine", check_machine),  # workers the machine cannot host make the geometry moot
    Step("batch geometry", validate.check_batch_geometry, needs_clean=True),
    Step("critic batch geometry", validate.check_critic_geometry, needs_clean=True),
    Step("model positions", check_positions, needs_clean=True),
    Step("sequence parallelism vs attention heads", check_lever_heads, needs_clean=True),
    Step("vLLM engine arguments", check_vllm_engine, needs_clean=True),
]

TOKENIZER: list[Step] = [
    Step("tokenizer", check_tokenizer),  # (cfg, run, tokenizer)
]

DATASETS: list[Step] = [
    Step("a batch fits the data", check_batch),  # (cfg, run, train, val)
    Step("a scorer for every data_source", check_scorers),
]

CLUSTER: list[Step] = [
    Step("the cluster's nodes", cluster_problems),
]


def run_phase(steps: list[Step], cfg: PPOTrainerConfig, run: Run, *loaded) -> None:
    """Every step of a phase; ConfigError listing all their problems."""
    problems: list[str] = []
    for step in steps:
        if step.needs_clean and problems:
            continue
        problems += step.fn(cfg, run, *loaded)
    if problems:
        raise ConfigError(problems)


def check(cfg: PPOTrainerConfig, run: Run) -> None:
    """The CHECKS phase alone (on a config already resolved)."""
    run_phase(CHECKS, cfg, run)


def prepare(cfg: PPOTrainerConfig, num_gpus: int | None = None, links: dict[str, str] | None = None) -> Run:
    """Resolve and check `cfg` in place; the Run it amounts to. `num_gpus`: GPUs visible (default:
    here); `links`: the composed config's `${...}` links (config/domains.linked_keys)."""
    run = run_of(cfg, dev.num_visible_gpus() if num_gpus is None else num_gpus)
    run = replace(run, links=dict(links or {}))
    placeholders = check_placeholders(cfg, run)
    if placeholders:  # verl's defaults, not a user's mistakes: this one message only
        raise ConfigError(placeholders)
    for phase in (VALUES, RESOLVE, CHECKS):
        run_phase(phase, cfg, run)
    return run


def check_tokenizer_fit(cfg: PPOTrainerConfig, run: Run, tokenizer) -> None:
    run_phase(TOKENIZER, cfg, run, tokenizer)


def check_datasets(cfg: PPOTrainerConfig, run: Run, train, val) -> None:
    run_phase(DATASETS, cfg, run, train, val)


def check_cluster(cfg: PPOTrainerConfig) -> None:
    """Right after joining a Ray cluster (or finding one running), before any worker starts."""
    run_phase(CLUSTER, cfg, run_of(cfg, dev.num_visible_gpus()))
