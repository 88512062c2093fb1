"""Entry point: `python -m verl_lite.main_ppo [--config-name demo] key=value ...`.

Compose the config with Hydra (verl's '+' spellings and unknown keys are handled on argv first,
config/overrides.py), build it (config/compose.py), resolve and check everything that can be
known without workers, load the tokenizer, datasets and reward manager (each checked too), then
start or join Ray, reserve the workers' slots, settle what the devices decide and freeze the config,
build the trainer from the frozen config, launch the worker groups and train: verl_lite/preflight.py lists the start-up in order. The
driver's and the workers' output is routed before anything starts (utils/logs.py): the console
shows the run, the run folder's log files keep the rest. Ray is shut down afterwards when this
process started it, so Hydra multirun jobs each get a fresh one.

Bad input found at start-up (ConfigError) and failures while training (RunError: a reward function
that fails or hangs; WorkerError: a worker that raises or dies) end the run the same way: one line
`verl_lite: ...` on stderr and exit status 2.

The components (torch, transformers, Ray: seconds to import) are imported only once the config has
passed the key checks, so a misspelled key or a refused value is reported in about a second.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from verl_lite.config.compose import build_config, register_schema
from verl_lite.config.hydra_job import apply_job_output_dir
from verl_lite.config.overrides import OverrideError, normalize_argv
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.config.user_config import check_user_config, not_verl_lites
from verl_lite.errors import RunError, one_line
from verl_lite.preflight_early import check_early
from verl_lite.utils import import_gc
from verl_lite.utils.paths import output_folder_problem

if TYPE_CHECKING:
    from verl_lite.trainer.ppo_trainer import RayPPOTrainer, TrainerInputs

log = logging.getLogger("verl_lite")
register_schema()
SPELLING_NOTES: list[str] = []  # one line per verl 0.7 spelling on the command line (config/dialects.py)


def build_datasets(cfg: PPOTrainerConfig, tokenizer):
    from verl_lite.data.rlhf_dataset import PromptSpec, RLHFDataset
    from verl_lite.tools.registry import tool_schemas

    d = cfg.data
    tools = tool_schemas(d.tool_config_path, "data.tool_config_path")  # verl: tools in the chat template
    spec = PromptSpec(
        d.prompt_key,
        d.reward_fn_key,
        d.max_prompt_length,
        d.truncation,
        d.filter_overlong_prompts,
        d.return_raw_chat,
        shuffle=d.shuffle,
        seed=d.seed,
        chat_template_kwargs=dict(d.apply_chat_template_kwargs),
        tools=tuple(tools) if tools else None,
    )
    train = RLHFDataset(d.train_files, tokenizer, dataclasses.replace(spec, max_samples=d.train_max_samples))
    val_spec = dataclasses.replace(spec, max_samples=d.val_max_samples)
    val = RLHFDataset(d.val_files, tokenizer, val_spec) if d.val_files else None
    return train, val


def build_reward_fns(cfg: PPOTrainerConfig, tokenizer, score, train=None, val=None):
    """Training and validation reward managers (reward_manager.name, by default reward_model.reward_manager);
    validation shows one sample. Each names a failing sample by its dataset's file and row."""
    from verl_lite.reward.managers import build_reward_manager

    rm = cfg.reward_model
    return tuple(
        build_reward_manager(
            cfg.reward_manager.name,
            tokenizer,
            score,
            cfg.data.reward_fn_key,
            num_examine,
            rm.reward_kwargs,
            cfg.actor_rollout_ref.rollout.response_length,
            timeout=rm.timeout,
            locate=dataset.where if dataset is not None else None,
            experiment_name=cfg.trainer.experiment_name,
        )
        for num_examine, dataset in ((0, train), (1, val))
    )


def run_dir(cfg: PPOTrainerConfig) -> str:
    """The run's folder for its log files: Hydra's job folder (beside .hydra/), else default_local_dir."""
    if HydraConfig.initialized():
        return HydraConfig.get().runtime.output_dir
    return cfg.trainer.default_local_dir


class SetupError(Exception):
    """Bad input found before any worker starts: reported as one message, exit status 2."""


def _setup_error(e: Exception) -> SetupError:
    """One problem is one line; several are listed under one heading (ConfigError)."""
    problems = getattr(e, "problems", None) or []
    return SetupError(problems[0] if len(problems) == 1 else str(e))


def load_inputs(cfg: PPOTrainerConfig) -> TrainerInputs:
    """Everything that can fail on bad input, checked before Ray starts (preflight.py lists what): the
    config resolved and checked, the tokenizer, the datasets, the reward functions, the checkpoint to
    resume from."""
    from verl_lite import preflight
    from verl_lite.reward.managers import REWARD_MANAGERS
    from verl_lite.reward.scorers import load_custom_scorer
    from verl_lite.trainer.ppo_trainer import TrainerInputs
    from verl_lite.trainer.trainer_checkpoint import TrainerCheckpoint
    from verl_lite.utils.hf_model import load_tokenizer
    from verl_lite.workers.checks import actor_tokenizer_path

    try:
        run = preflight.prepare(cfg)
        model = cfg.actor_rollout_ref.model
        tokenizer = load_tokenizer(
            actor_tokenizer_path(cfg), cfg.data.trust_remote_code, model.custom_chat_template
        )
        preflight.run_phase(preflight.TOKENIZER, cfg, run, tokenizer)
        train, val = build_datasets(cfg, tokenizer)
        for phase in (preflight.RESOLVE_DATA, preflight.DATASETS):  # the training steps, then checks
            preflight.run_phase(phase, cfg, run, train, val)
        crf = cfg.custom_reward_function
        manager = REWARD_MANAGERS.get(cfg.reward_manager.name)  # how it calls the function (batch, prime)
        score = load_custom_scorer(
            crf.path, crf.name, dict(crf.reward_kwargs), manager.call, manager.positional_call
        )
        reward_fn, val_reward_fn = build_reward_fns(cfg, tokenizer, score, train, val)
        checkpoint = TrainerCheckpoint(cfg, run.critic, run.world)  # finds and vets the one to resume from
    except (ValueError, FileNotFoundError, AttributeError) as e:
        raise _setup_error(e) from e
    return TrainerInputs(run, tokenizer, train, val, reward_fn, val_reward_fn, checkpoint)


def build_trainer(cfg: PPOTrainerConfig) -> RayPPOTrainer:
    """A trainer without workers (no Ray): the inputs loaded, the config made final with no device to
    probe and frozen. Tests drive its phases with workers of their own; a run starts with
    start_trainer."""
    from verl_lite import preflight
    from verl_lite.trainer.ppo_trainer import RayPPOTrainer

    inputs = load_inputs(cfg)
    try:
        preflight.finalize(cfg, inputs.run, [])
        return RayPPOTrainer(cfg, inputs)
    except ValueError as e:
        raise _setup_error(e) from e


def start_trainer(cfg: PPOTrainerConfig, inputs: TrainerInputs, started_ray: bool = False) -> RayPPOTrainer:
    """Once Ray runs: a cluster this process did not start is checked (its nodes are known only now),
    the workers' slots are reserved and their devices probed, the config is made final and frozen
    (preflight.finalize: trainer.auto_offload's choice, the checks on it), and only then the trainer is
    built from it and builds the workers. On a failure what was reserved or started is released."""
    from verl_lite import preflight
    from verl_lite.single_controller.checks import joins_cluster
    from verl_lite.trainer.ppo_trainer import RayPPOTrainer
    from verl_lite.trainer.worker_setup import reserve_slots

    run = inputs.run
    try:
        if joins_cluster(cfg) or not started_ray:
            preflight.run_phase(preflight.CLUSTER, cfg, run)
    except ValueError as e:
        raise _setup_error(e) from e
    pool, slots = reserve_slots(cfg, run)
    try:
        preflight.finalize(cfg, run, slots)
        trainer = RayPPOTrainer(cfg, inputs, pool)
    except BaseException as e:
        pool.release()
        if isinstance(e, ValueError):
            raise _setup_error(e) from e
        raise
    try:
        trainer.init_workers()
    except BaseException:
        trainer.shutdown()
        raise
    return trainer


def start_ray(cfg: PPOTrainerConfig) -> None:
    from verl_lite.trainer.ray_start import start_ray as start

    start(cfg)


def run_ppo(cfg: PPOTrainerConfig) -> dict[str, float]:
    import ray

    inputs = load_inputs(cfg)
    started_ray = not ray.is_initialized()
    start_ray(cfg)
    try:
        trainer = start_trainer(cfg, inputs, started_ray)
        try:
            return trainer.fit()
        finally:
            trainer.shutdown()
    finally:
        if cfg.ray_kwargs.timeline_json_file:  # verl's key: Ray's task timeline, for chrome://tracing
            ray.timeline(filename=cfg.ray_kwargs.timeline_json_file)
        if started_ray:
            ray.shutdown()


def import_components() -> None:
    """Ray, torch and transformers (seconds to import), once the keys have passed: their loggers must
    exist before utils/logs.py routes them off the console."""
    for name in ("ray", "transformers", "verl_lite.trainer.ppo_trainer"):
        importlib.import_module(name)


def run(config: DictConfig) -> None:
    """The CLI's body (Hydra main and tests call it): train, or exit 2 with one line on bad input or a
    failed run."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for note in SPELLING_NOTES:  # one console line each, naming verl 0.9's spelling
        logging.getLogger("verl_lite.config").info("%s", note)
    try:
        try:
            wrong_config = not_verl_lites(config)
            if wrong_config:
                raise SetupError(wrong_config)
            cfg = build_config(config)
            apply_job_output_dir(cfg)
            check_early(cfg)  # placeholder paths and value domains, before the imports
        except ValueError as e:
            raise _setup_error(e) from e
        import_components()
        import_gc.resume()  # the driver's libraries are in (utils/import_gc.py)
        from verl_lite.utils.logs import setup_driver_logging

        folder = run_dir(cfg)
        unusable = output_folder_problem(folder)
        if unusable:  # the log folder: Hydra's job folder, else trainer.default_local_dir
            key = "hydra.run.dir" if HydraConfig.initialized() else "trainer.default_local_dir"
            raise SetupError(f"{key}={folder!r} {unusable}; point {key} at a folder this run can write")
        log_file = setup_driver_logging(folder)
        log.info("logs: %s (driver), %s (workers)", log_file, os.path.join(folder, "logs"))
        run_ppo(cfg)
    except SetupError as e:
        print(f"verl_lite: {e}", file=sys.stderr)
        sys.exit(2)
    except RunError as e:
        _report_failure(e)
    except Exception as e:
        from verl_lite.single_controller import WorkerError

        if not isinstance(e, WorkerError):
            raise
        _report_failure(e)


def _report_failure(e: Exception) -> None:
    """A failed run: the long form (a remote traceback) to the log, its first line to the user, exit 2."""
    detail = getattr(e, "detail", "") or str(e)
    if detail != str(e) or "\n" in detail:
        from verl_lite.utils.logs import FILE_ONLY

        log.error("%s", detail, extra={FILE_ONLY: True})  # the console gets the one line below
    print(f"verl_lite: {one_line(str(e).splitlines()[0])}", file=sys.stderr)
    sys.exit(2)


@hydra.main(config_path="../conf", config_name="ppo_trainer", version_base=None)
def main(config: DictConfig) -> None:
    run(config)


# how long the threads still alive at exit get to finish before they are called stray: a pool shut
# down without waiting (transformers' weight loading does so) has threads that end a moment later,
# more than a moment on a loaded machine
STRAY_GRACE_S = 2.0


def exit_past_stray_threads(code, grace_s: float = STRAY_GRACE_S) -> None:
    """End the process with `code`. Python waits at exit for every non-daemon thread, so a thread a
    reward function (or a library it calls) started and left running would keep a finished run
    alive forever: such threads, still running after `grace_s`, are named on the console and not
    waited for."""
    stray = [
        t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()
    ]
    deadline = time.monotonic() + grace_s
    for t in stray:
        t.join(max(0.0, deadline - time.monotonic()))
    stray = [t for t in stray if t.is_alive()]
    if not stray:
        import_gc.exit_now(code)
    names = ", ".join(repr(t.name) for t in stray)
    print(
        f"verl_lite: the run is over but {len(stray)} non-daemon thread(s) started during it are still "
        f"running ({names}, e.g. left by the reward function); exiting without waiting for them",
        file=sys.stderr,
    )
    # no atexit handlers here: a normal exit runs them after it has waited for the threads, and this one does not wait
    import_gc.end(import_gc.exit_status(code))


if __name__ == "__main__":
    try:  # verl's `+key` spellings, verl 0.7's and 0.9's spellings and unknown keys, before Hydra (sweeps included)
        notes: list[str] = []
        sys.argv[1:] = normalize_argv(sys.argv[1:], notes)
    except OverrideError as e:
        print(f"verl_lite: {e}", file=sys.stderr)
        sys.exit(2)
    SPELLING_NOTES[:] = notes  # said by run(), once Hydra has set up the console log
    # a user's YAML, a value of the wrong type: Hydra's refusals in one line
    problem = check_user_config(sys.argv[1:])
    if problem:
        print(f"verl_lite: {problem}", file=sys.stderr)
        sys.exit(2)
    try:
        main()
        status = 0
    except SystemExit as e:  # Hydra's and run's exits (2 on bad input or a failed run)
        status = e.code
    exit_past_stray_threads(status)
