"""The models' start-up steps (registered in verl_lite/preflight.py).

`check_models`: every model folder the run loads (the actor's; the critic's and the reward model's
when the run has them) is a HF model folder with a config.json transformers reads, its weights
whole (utils/model_files.py) and fitting the model the config builds, every tensor in place and of
its shape (utils/model_weights.py), the
tokenizer folder has tokenizer files, and the critic and reward model read the actor's token ids,
so their vocabularies match. `check_positions`: prompt + response fit every model's positions.
`check_tokenizer` (once the tokenizer is loaded): a real tokenizer with a chat template whose ids
the actor's embedding has.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from verl_lite.config.common import sp_size
from verl_lite.engine.mesh import heads_problem
from verl_lite.utils.hf_model import check_model_dir, model_config
from verl_lite.utils.model_files import (
    max_positions,
    read_config,
    tokenizer_files_problem,
    tokenizer_problems,
    weight_problems,
)
from verl_lite.utils.model_weights import fit_problems, model_type_problem

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig

ARR = "actor_rollout_ref"


def tokenizer_source(cfg: PPOTrainerConfig) -> tuple[str, str]:
    """(key, folder) of the run's tokenizer: data.tokenizer, else model.tokenizer_path, else the model."""
    model = cfg.actor_rollout_ref.model
    if cfg.data.tokenizer:
        return "data.tokenizer", cfg.data.tokenizer
    if model.tokenizer_path:
        return f"{ARR}.model.tokenizer_path", model.tokenizer_path
    return f"{ARR}.model.path", model.path


def actor_tokenizer_path(cfg: PPOTrainerConfig) -> str:
    return tokenizer_source(cfg)[1]


def model_folders(cfg: PPOTrainerConfig, run: Run) -> list[tuple[str, str, dict]]:
    """(key, folder, override_config) of every model the workers load from disk, the actor's first."""
    model = cfg.actor_rollout_ref.model
    folders = [(f"{ARR}.model.path", model.path, model.override_config)]
    if run.critic:
        folders.append(("critic.model.path", cfg.critic.model.path, cfg.critic.model.override_config))
    if run.reward_model and cfg.reward_model.model.path:
        rm = cfg.reward_model.model
        folders.append(("reward_model.model.path", rm.path, rm.override_config))
    return folders


def _model_dir(key: str, path: str | None, model_cfg=None, kind: str = "causal_lm") -> list[str]:
    """The folder, its config.json (valid JSON, a model type transformers knows), its weight files
    whole, and their tensors fitting the model the config builds (no missing, unexpected or
    reshaped weight: utils/model_weights.py)."""
    try:
        check_model_dir(path or "", key)
        problem = model_type_problem(path, key, bool(model_cfg and model_cfg.trust_remote_code))
    except (FileNotFoundError, ValueError) as e:
        return [str(e)]
    problems = [problem] if problem else weight_problems(path, key)
    if problems or model_cfg is None:
        return problems
    section = key.removesuffix(".path")
    try:
        config = model_config(model_cfg, section, kind)
    except ValueError as e:  # override_config naming a field the config lacks
        return [str(e)]
    return fit_problems(config, path, key, kind)


def _vocab_size(path: str) -> int | None:
    try:
        return read_config(path).get("vocab_size")
    except (OSError, ValueError):
        return None


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
    problems = _model_dir("critic.model.path", c.path, c, "value") or _same_vocab(
        cfg, "critic.model.path", c.path
    )
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
    problems = _model_dir("reward_model.model.path", rm.model.path, rm.model, "reward") or _same_vocab(
        cfg, "reward_model.model.path", rm.model.path
    )
    if not rm.use_dynamic_bsz and rm.micro_batch_size_per_gpu is None:
        problems.append("reward_model.micro_batch_size_per_gpu is not set; set it (e.g. 8)")
    return problems


def _tokenizer_folder(cfg: PPOTrainerConfig) -> list[str]:
    key, path = tokenizer_source(cfg)
    if not os.path.isdir(path):
        return [] if key == f"{ARR}.model.path" else [f"{key}={path!r}: no such folder"]
    problem = tokenizer_files_problem(path, key)
    return [problem] if problem else []


def check_models(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    model = cfg.actor_rollout_ref.model
    problems = _model_dir(f"{ARR}.model.path", model.path, model, "causal_lm")
    if run.critic:
        problems += _critic(cfg)
    if run.reward_model:
        problems += _reward_model(cfg)
    return problems + _tokenizer_folder(cfg)


def check_positions(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """prompt + response within every model's positions (max_position_embeddings, with override_config)."""
    r, problems = cfg.actor_rollout_ref.rollout, []
    seq = cfg.data.max_prompt_length + r.response_length
    for key, path, override in model_folders(cfg, run):
        limit = max_positions(read_config(path) | dict(override or {}))
        if limit is not None and seq > limit:
            problems.append(
                f"data.max_prompt_length + {ARR}.rollout.response_length = {cfg.data.max_prompt_length} + "
                f"{r.response_length} = {seq} tokens is longer than the model's {limit} positions "
                f"({key}={path!r}, max_position_embeddings); shorten them to fit {limit}"
            )
    return problems


def check_lever_heads(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """Sequence parallelism splits the attention heads of the actor's and the critic's models
    (engine/ulysses.py's rule, the one the engine applies)."""
    roles = {f"{ARR}.model.path": ("actor", f"{ARR}.actor"), "critic.model.path": ("critic", "critic")}
    problems = []
    for model_key, path, override in model_folders(cfg, run):
        if model_key in roles:
            role, prefix = roles[model_key]
            heads = (read_config(path) | dict(override or {})).get("num_attention_heads")
            key = f"{prefix}.ulysses_sequence_parallel_size"
            problem = heads_problem(heads, sp_size(cfg, role), key, f"{model_key}={path!r}", run.world)
            problems += [problem] if problem else []
    return problems


def check_tokenizer(cfg: PPOTrainerConfig, run: Run, tokenizer) -> list[str]:
    """The loaded tokenizer: a vocabulary, a chat template, ids within the actor's embedding."""
    key, path = tokenizer_source(cfg)
    model = cfg.actor_rollout_ref.model
    actor = read_config(model.path) | dict(model.override_config or {})
    return tokenizer_problems(tokenizer, key, path, actor.get("vocab_size"), f"{ARR}.model.path")
