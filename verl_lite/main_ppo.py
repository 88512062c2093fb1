"""Entry point: `python -m verl_lite.main_ppo key=value ...`.

Compose the config with Hydra, resolve embedded assets, validate everything that can be checked
without workers (config values, files, model folders, the datasets themselves, the machine; see
preflight.py), then start or join Ray, launch the worker group and train. The driver's and the
workers' output is routed before anything starts (utils/logs.py): the console shows the run, the
run folder's log files keep the rest. Ray is shut down afterwards when this process started it, so
Hydra multirun jobs each get a fresh one.

Bad input found at start-up (InputError, ConfigError) and failures while training (RunError: a
reward function that fails or hangs; WorkerError: a worker that raises or dies) end the run the
same way: one line `verl_lite: ...` on stderr and exit status 2.
"""

from __future__ import annotations

import logging
import os
import sys

import hydra
import ray
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from verl_lite import preflight
from verl_lite.config.compose import build_config, register_schema
from verl_lite.config.domains import linked_keys
from verl_lite.config.hydra_job import apply_job_output_dir
from verl_lite.config.overrides import OverrideError, normalize_argv
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.config.validate import check_placeholders, validate
from verl_lite.data import assets
from verl_lite.data.rlhf_dataset import PromptSpec, RLHFDataset
from verl_lite.errors import InputError, RunError, one_line
from verl_lite.reward.managers import build_reward_manager
from verl_lite.reward.scorers import load_custom_scorer
from verl_lite.single_controller import WorkerError
from verl_lite.trainer.ppo_trainer import RayPPOTrainer, start_ray
from verl_lite.utils import device as dev
from verl_lite.utils.hf_model import load_tokenizer
from verl_lite.utils.logs import setup_driver_logging

log = logging.getLogger("verl_lite")
register_schema()


def resolve_assets(cfg: PPOTrainerConfig) -> None:
    """Replace verl_lite:// paths by local ones, building the embedded assets on first use."""
    cfg.actor_rollout_ref.model.path = assets.resolve(cfg.actor_rollout_ref.model.path)
    for key in ("train_files", "val_files"):
        files = getattr(cfg.data, key)
        if files:
            resolved = [assets.resolve(f) for f in ([files] if isinstance(files, str) else files)]
            setattr(cfg.data, key, resolved)
    if cfg.data.tokenizer:
        cfg.data.tokenizer = assets.resolve(cfg.data.tokenizer)
    for model in (cfg.critic.model, cfg.reward_model.model):
        if model.path:
            model.path = assets.resolve(model.path)
    for model, key in ((cfg.critic.model, "tokenizer_path"), (cfg.reward_model.model, "input_tokenizer")):
        if getattr(model, key):
            setattr(model, key, assets.resolve(getattr(model, key)))


def build_datasets(cfg: PPOTrainerConfig, tokenizer):
    d = cfg.data
    spec = PromptSpec(
        d.prompt_key,
        d.reward_fn_key,
        d.max_prompt_length,
        d.truncation,
        d.filter_overlong_prompts,
        d.return_raw_chat,
    )
    train = RLHFDataset(d.train_files, tokenizer, spec)
    val = RLHFDataset(d.val_files, tokenizer, spec) if d.val_files else None
    return train, val


def set_total_training_steps(cfg: PPOTrainerConfig, trainer: RayPPOTrainer) -> None:
    cfg.actor_rollout_ref.actor.optim.total_training_steps = trainer.total_training_steps
    cfg.critic.optim.total_training_steps = trainer.total_training_steps


def build_reward_fns(cfg: PPOTrainerConfig, tokenizer, score, train=None, val=None):
    """Training and validation reward managers (reward_manager.name, by default reward_model.reward_manager);
    validation shows one sample. Each names a failing sample by its dataset's file and row."""
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


def _raise_if(problems: list[str]) -> None:
    if problems:
        raise InputError(problems)


def _setup_error(e: Exception) -> SetupError:
    """One problem is one line; several are listed under one heading (ConfigError, InputError)."""
    problems = getattr(e, "problems", None) or []
    return SetupError(problems[0] if len(problems) == 1 else str(e))


def build_trainer(cfg: PPOTrainerConfig, links: dict[str, str] | None = None) -> RayPPOTrainer:
    """Everything that can fail on bad input, checked before Ray starts (preflight.py lists what).
    `links`: the composed config's `${...}` links, so a bad value is named once, where it was set."""
    num_gpus = dev.num_visible_gpus()
    use_gpu = dev.wants_accelerator(cfg.trainer.device)
    try:
        check_placeholders(cfg)
        resolve_assets(cfg)
        _raise_if(preflight.check_values(cfg, links))  # the checks below read these values
        _raise_if(
            preflight.check_data_files(cfg)
            + preflight.check_reward_file(cfg)
            + preflight.check_machine(cfg, use_gpu, num_gpus)
        )
        validate(cfg, num_gpus=num_gpus)
        _raise_if(preflight.check_models(cfg))
        tokenizer = load_tokenizer(*preflight.tokenizer_source(cfg)[1:], cfg.data.trust_remote_code)
        _raise_if(preflight.check_model_fit(cfg, tokenizer, use_gpu))
        train, val = build_datasets(cfg, tokenizer)
        _raise_if(preflight.check_datasets(cfg, train, val))
        score = load_custom_scorer(cfg.custom_reward_function.path, cfg.custom_reward_function.name)
        reward_fn, val_reward_fn = build_reward_fns(cfg, tokenizer, score, train, val)
    except (ValueError, FileNotFoundError, AttributeError) as e:
        raise _setup_error(e) from e
    try:  # also finds and checks the checkpoint to resume from
        trainer = RayPPOTrainer(cfg, train, val, reward_fn, val_reward_fn, use_gpu, tokenizer=tokenizer)
    except (ValueError, FileNotFoundError) as e:
        raise SetupError(str(e)) from e
    set_total_training_steps(cfg, trainer)
    return trainer


def run_ppo(cfg: PPOTrainerConfig, links: dict[str, str] | None = None) -> dict[str, float]:
    trainer = build_trainer(cfg, links)
    started_ray = not ray.is_initialized()
    start_ray(cfg)
    try:
        if preflight.joins_cluster(cfg) or not started_ray:  # the nodes are known only now
            problems = preflight.check_cluster(cfg, trainer.use_gpu)
            if problems:
                raise _setup_error(InputError(problems))
        trainer.init_workers()
        return trainer.fit()
    finally:
        trainer.shutdown()
        if started_ray:
            ray.shutdown()


def run(config: DictConfig) -> None:
    """The CLI's body (Hydra main and tests call it): train, or exit 2 with one line on bad input or a
    failed run."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        try:
            links = linked_keys(OmegaConf.to_container(config, resolve=False))
            cfg = build_config(config)
            apply_job_output_dir(cfg)
        except ValueError as e:
            raise _setup_error(e) from e
        folder = run_dir(cfg)
        log_file = setup_driver_logging(folder)
        log.info("logs: %s (driver), %s (workers)", log_file, os.path.join(folder, "logs"))
        run_ppo(cfg, links)
    except SetupError as e:
        print(f"verl_lite: {e}", file=sys.stderr)
        sys.exit(2)
    except (RunError, WorkerError) as e:
        detail = getattr(e, "detail", "") or str(e)
        if detail != str(e) or "\n" in detail:
            log.error("%s", detail)  # the long form (a remote traceback) stays in the log
        print(f"verl_lite: {one_line(str(e).splitlines()[0])}", file=sys.stderr)
        sys.exit(2)


@hydra.main(config_path="../conf", config_name="ppo_trainer", version_base=None)
def main(config: DictConfig) -> None:
    run(config)


if __name__ == "__main__":
    try:  # verl's `+key` spellings and unknown keys, before Hydra (sweeps included)
        sys.argv[1:] = normalize_argv(sys.argv[1:])
    except OverrideError as e:
        print(f"verl_lite: {e}", file=sys.stderr)
        sys.exit(2)
    main()
