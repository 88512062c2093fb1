"""Start-up: the config made final before any worker exists, in one order. Each derived value is
filled in by a named resolve step (the only code outside config/ that writes the config:
tests/test_config_writes.py); every check then runs on the final values; then the config is frozen
and the workers get their sections of it. Bad input stops the run with one ConfigError listing every
problem of the phase, one line each (the key or file and row, the value, the fix); main_ppo prints
it and exits 2, before Ray wherever the problem can be known there.

    build_config (config/compose.py)   composed, verl's '+' spellings, support table, links resolved
    check_early (preflight_early.py)   verl's placeholder paths, then VALUES: each value as written
                                       (before torch, transformers and Ray are imported)
    prepare                            RESOLVE: asset paths, verl's derived values, rollout.name=auto
                                       and max_model_len; then CHECKS on the resolved config
    (main_ppo loads the tokenizer)     TOKENIZER
    (main_ppo loads the datasets)      RESOLVE_DATA (the training steps), then DATASETS
    (main_ppo vets the checkpoint to resume from, then starts or joins Ray)
    CLUSTER                            the nodes of a cluster joined or found running
    (trainer/worker_setup.reserve_slots: the workers' slots, their devices probed)
    finalize                           RESOLVE_DEVICES (trainer.auto_offload's choice, a colocated
                                       critic / reward model idle on the host), CHECKS again
                                       when it changed a value, then freeze (config/freeze.py)
    (main_ppo builds RayPPOTrainer from the frozen config -- its phases are chosen then, after Ray:
    an estimator asking for a phase the trainer lacks is refused there -- and it builds the workers)

Adding a step: write `fn(cfg, run[, loaded...]) -> list[str]` next to its component (in
<component>/checks.py) and add one `Step("name", fn)` line to its phase. `run` (config/run.py) says
what the config amounts to (world, roles, GPUs, linked keys), so no step re-derives it. A step
marked `needs_clean` runs only when the steps before it in its phase found nothing (it assumes sane
values, or reads files the earlier steps vouch for). Importing this module imports the components:
main_ppo does so only after check_early.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from verl_lite.agent_loop.checks import check_agent_rows, check_multi_turn, check_turn_end
from verl_lite.algos.checks import check_algorithm
from verl_lite.config.freeze import freeze
from verl_lite.config.normalize import derive_values
from verl_lite.config.run import Run
from verl_lite.config.validate import check_batch_geometry, check_critic_geometry, check_relations
from verl_lite.config.values import check_choices
from verl_lite.data.assets import resolve_paths
from verl_lite.data.checks import check_batch, check_data
from verl_lite.engine.checks import check_engines, check_levers
from verl_lite.planner.auto_offload import resolve_auto_offload, resolve_idle_on_host
from verl_lite.preflight_early import VALUES, Step, placeholders_first, run_of, run_phase
from verl_lite.reward.checks import check_reward, check_scorers
from verl_lite.rollout.checks import check_rollout, check_vllm_engine, resolve_rollout
from verl_lite.single_controller.checks import check_cluster as check_nodes
from verl_lite.single_controller.checks import check_machine
from verl_lite.trainer.checks import check_async_rows, check_trainer, resolve_training_steps
from verl_lite.workers.checks import check_lever_heads, check_models, check_positions, check_tokenizer
from verl_lite.workers.lora_checks import check_lora

if TYPE_CHECKING:
    from verl_lite.config.schema import PPOTrainerConfig

RESOLVE: list[Step] = [
    Step("embedded assets and ~ in paths", resolve_paths),
    Step("verl's derived values", derive_values),
    Step("rollout", resolve_rollout),
]

CHECKS: list[Step] = [
    Step("choices", check_choices),  # with the rest, so a misspelled mode is one line of one refusal
    Step("values together", check_relations),
    Step("memory levers", check_levers),
    Step("rollout", check_rollout),
    Step("engines", check_engines),
    Step("LoRA", check_lora),
    Step("algorithm", check_algorithm),
    Step("reward", check_reward),
    Step("data", check_data),
    Step("multi-turn rollouts", check_multi_turn),
    Step("trainer", check_trainer),
    Step("models", check_models),
    Step("machine", check_machine),  # workers the machine cannot host make the geometry moot
    Step("batch geometry", check_batch_geometry, needs_clean=True),
    Step("critic batch geometry", check_critic_geometry, needs_clean=True),
    Step("model positions", check_positions, needs_clean=True),
    Step("sequence parallelism vs attention heads", check_lever_heads, needs_clean=True),
    Step("vLLM engine arguments", check_vllm_engine, needs_clean=True),
]

TOKENIZER: list[Step] = [  # (cfg, run, tokenizer)
    Step("tokenizer", check_tokenizer),
    Step("the format's turn end stops the model", check_turn_end, needs_clean=True),
]

RESOLVE_DATA: list[Step] = [Step("training steps", resolve_training_steps)]  # (cfg, run, train, val)

DATASETS: list[Step] = [
    Step("a batch fits the data", check_batch),  # (cfg, run, train, val)
    Step("a scorer for every data_source", check_scorers),
    Step("agent loops of the rows", check_agent_rows),
    Step("the async modes' agent-loop rows", check_async_rows),
]

CLUSTER: list[Step] = [Step("the cluster's nodes", check_nodes)]

RESOLVE_DEVICES: list[Step] = [  # (cfg, run, [(device, host) GiB per slot])
    Step("trainer.auto_offload", resolve_auto_offload),
    Step("a critic / reward model idle on the host", resolve_idle_on_host),
]

RESOLVE_PHASES = (RESOLVE, RESOLVE_DATA, RESOLVE_DEVICES)  # the config's only writers outside config/


def prepare(cfg: PPOTrainerConfig, num_gpus: int | None = None) -> Run:
    """Resolve and check `cfg` in place (the placeholders, VALUES, RESOLVE, CHECKS); the Run it amounts
    to. `num_gpus`: GPUs visible (default: here)."""
    run = placeholders_first(cfg, num_gpus) or run_of(cfg, num_gpus)
    for phase in (VALUES, RESOLVE, CHECKS):
        run_phase(phase, cfg, run)
    return run


def finalize(cfg: PPOTrainerConfig, run: Run, slots: list[tuple[float, float]]) -> None:
    """Once the workers' slots are reserved and probed (`slots`: each one's device and its node's
    available host memory, GiB; empty when nothing asked for them): what the devices decide, the checks again on any value that
    changed, then the freeze. The workers are built from what this leaves."""
    before = copy.deepcopy(cfg)
    run_phase(RESOLVE_DEVICES, cfg, run, slots)
    if cfg != before:
        run_phase(CHECKS, cfg, run)
    freeze(cfg)
