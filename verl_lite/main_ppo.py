"""Entry point: `python -m verl_lite.main_ppo key=value ...`.

Compose the config with Hydra, resolve embedded assets, validate everything that can be checked
without workers (config, files, the datasets themselves), then start or join Ray, launch the worker
group and train. The driver's and the workers' output is routed before anything starts
(utils/logs.py): the console shows the run, the run folder's log files keep the rest. Ray is shut
down afterwards when this process started it, so Hydra multirun jobs each get a fresh one.
"""

from __future__ import annotations

import logging
import os
import sys

import hydra
import ray
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from verl_lite.config.compose import build_config, register_schema
from verl_lite.config.hydra_job import apply_job_output_dir
from verl_lite.config.overrides import OverrideError, normalize_argv
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.config.validate import check_placeholders, validate
from verl_lite.data import assets
from verl_lite.data.rlhf_dataset import PromptSpec, RLHFDataset
from verl_lite.reward.managers import build_reward_manager
from verl_lite.reward.scorers import load_custom_scorer
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


def build_reward_fns(cfg: PPOTrainerConfig, tokenizer, score):
    """Training and validation reward managers (reward_manager.name, by default reward_model.reward_manager);
    validation shows one sample."""
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
        )
        for num_examine in (0, 1)
    )


def run_dir(cfg: PPOTrainerConfig) -> str:
    """The run's folder for its log files: Hydra's job folder (beside .hydra/), else default_local_dir."""
    if HydraConfig.initialized():
        return HydraConfig.get().runtime.output_dir
    return cfg.trainer.default_local_dir


class SetupError(Exception):
    """Bad input found before any worker starts: reported as one message, exit status 2."""


def build_trainer(cfg: PPOTrainerConfig) -> RayPPOTrainer:
    """Everything that can fail on bad input, checked before Ray starts."""
    try:
        check_placeholders(cfg)
        resolve_assets(cfg)
        validate(cfg, num_gpus=dev.num_visible_gpus())
        tokenizer = load_tokenizer(
            cfg.data.tokenizer or cfg.actor_rollout_ref.model.path, cfg.data.trust_remote_code
        )
        train, val = build_datasets(cfg, tokenizer)
        score = load_custom_scorer(cfg.custom_reward_function.path, cfg.custom_reward_function.name)
        reward_fn, val_reward_fn = build_reward_fns(cfg, tokenizer, score)
    except (ValueError, FileNotFoundError, AttributeError) as e:
        raise SetupError(str(e)) from e
    use_gpu = dev.wants_accelerator(cfg.trainer.device)
    try:  # also finds and checks the checkpoint to resume from
        trainer = RayPPOTrainer(cfg, train, val, reward_fn, val_reward_fn, use_gpu, tokenizer=tokenizer)
    except (ValueError, FileNotFoundError) as e:
        raise SetupError(str(e)) from e
    set_total_training_steps(cfg, trainer)
    return trainer


def run_ppo(cfg: PPOTrainerConfig) -> dict[str, float]:
    trainer = build_trainer(cfg)
    started_ray = not ray.is_initialized()
    start_ray(cfg)
    try:
        trainer.init_workers()
        return trainer.fit()
    finally:
        trainer.shutdown()
        if started_ray:
            ray.shutdown()


@hydra.main(config_path="../conf", config_name="ppo_trainer", version_base=None)
def main(config: DictConfig) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        try:
            cfg = build_config(config)
            apply_job_output_dir(cfg)
        except ValueError as e:
            raise SetupError(str(e)) from e
        folder = run_dir(cfg)
        log_file = setup_driver_logging(folder)
        log.info("logs: %s (driver), %s (workers)", log_file, os.path.join(folder, "logs"))
        run_ppo(cfg)
    except SetupError as e:
        print(f"verl_lite: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    try:  # verl's `+key` spellings and unknown keys, before Hydra (sweeps included)
        sys.argv[1:] = normalize_argv(sys.argv[1:])
    except OverrideError as e:
        print(f"verl_lite: {e}", file=sys.stderr)
        sys.exit(2)
    main()
