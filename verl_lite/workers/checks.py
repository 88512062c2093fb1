"""The models' start-up check (registered in verl_lite/startup.py): every model folder the run
loads (the actor's; the critic's and the reward model's when the run has them) is a HF model
folder, and the critic and reward model read the actor's token ids, so their vocabularies match."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from verl_lite.utils.hf_model import check_model_dir

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig

ARR = "actor_rollout_ref"


def actor_tokenizer_path(cfg: PPOTrainerConfig) -> str:
    """The tokenizer the run uses: data.tokenizer, else model.tokenizer_path, else the model's folder."""
    model = cfg.actor_rollout_ref.model
    return cfg.data.tokenizer or model.tokenizer_path or model.path


def _model_dir(key: str, path: str | None) -> list[str]:
    try:
        check_model_dir(path or "", key)
    except FileNotFoundError as e:
        return [str(e)]
    return []


def _vocab_size(path: str) -> int | None:
    try:
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    return config.get("vocab_size", (config.get("text_config") or {}).get("vocab_size"))


def _same_vocab(cfg: PPOTrainerConfig, key: str, path: str) -> list[str]:
    """A critic or reward model reads the actor's token ids: its embedding must cover the same vocabulary."""
    actor_path = cfg.actor_rollout_ref.model.path
    mine, actors = _vocab_size(path), _vocab_size(actor_path)
    if mine is None or actors is None or mine == actors:
        return []
    return [
        f"{key}={path!r} has vocab_size={mine} but the actor ({ARR}.model.path={actor_path!r}) has {actors}; "
        "it reads the actor's token ids, so use a model with the actor's tokenizer"
    ]


def _critic(cfg: PPOTrainerConfig) -> list[str]:
    c = cfg.critic.model
    problems = _model_dir("critic.model.path", c.path) or _same_vocab(cfg, "critic.model.path", c.path)
    if c.tokenizer_path and c.tokenizer_path not in (
        actor_tokenizer_path(cfg),
        cfg.actor_rollout_ref.model.path,
        c.path,
    ):
        problems.append(
            f"critic.model.tokenizer_path={c.tokenizer_path!r}: the critic reads the actor's token ids, so a "
            "different tokenizer is not supported; leave it at the actor's model"
        )
    return problems


def _reward_model(cfg: PPOTrainerConfig) -> list[str]:
    rm = cfg.reward_model
    if not rm.model.path:
        return ["reward_model.enable=True but reward_model.model.path is not set; point it at a reward model"]
    problems = _model_dir("reward_model.model.path", rm.model.path) or _same_vocab(
        cfg, "reward_model.model.path", rm.model.path
    )
    size = rm.micro_batch_size_per_gpu
    if not rm.use_dynamic_bsz and (size is None or size <= 0):
        problems.append(f"reward_model.micro_batch_size_per_gpu must be a positive integer, got {size}")
    return problems


def check_models(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    problems = _model_dir(f"{ARR}.model.path", cfg.actor_rollout_ref.model.path)
    if run.critic:
        problems += _critic(cfg)
    if run.reward_model:
        problems += _reward_model(cfg)
    return problems
