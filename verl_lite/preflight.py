"""Start-up checks of everything a run reads, before Ray starts: one line per problem, exit status 2.

main_ppo.build_trainer calls these in order; each returns a list of problems naming the key or
file (and row), the value and the fix, and the caller raises them together as an InputError.
The rules themselves live next to what they check; this module only knows which to apply:

    check_values      value domains of the config as written (config/domains.py)
    check_data_files  data.train_files / val_files: present, files, parquet (data/files.py)
    check_reward_file custom_reward_function.path: a file
    check_models      model folders: weights whole, tokenizer files there (utils/model_files.py)
    check_model_fit   the loaded tokenizer against the model; lengths against the model's positions;
                      vLLM's engine-argument rules (rollout/vllm_args.py)
    check_datasets    a train batch fits the data; every data_source has a scorer
    check_machine     the workers fit the machine (single_controller/capacity.py): for a local Ray
                      before it starts, for a cluster right after joining (`check_cluster`)
"""

from __future__ import annotations

import os

from verl_lite.config.domains import check_domains
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.config.validate_levers import check_heads
from verl_lite.config.validate_roles import uses_critic
from verl_lite.data.files import check_parquet_files
from verl_lite.data.rlhf_dataset import RLHFDataset, check_batch_fits
from verl_lite.reward.scorers import known_sources, missing_scorers
from verl_lite.rollout.vllm_args import check_engine_args
from verl_lite.single_controller.capacity import capacity_problems, cluster_nodes, local_node
from verl_lite.utils.model_files import (
    max_positions,
    read_config,
    tokenizer_files_problem,
    tokenizer_problems,
    weight_problems,
)

ARR = "actor_rollout_ref"


def check_values(cfg: PPOTrainerConfig, links: dict[str, str] | None = None) -> list[str]:
    """`links`: keys that follow another key in the composed config (config/domains.linked_keys)."""
    return check_domains(cfg, links=links)


def check_data_files(cfg: PPOTrainerConfig) -> list[str]:
    d = cfg.data
    return check_parquet_files(d.train_files, "data.train_files") + check_parquet_files(
        d.val_files, "data.val_files", required=False
    )


def check_reward_file(cfg: PPOTrainerConfig) -> list[str]:
    path = cfg.custom_reward_function.path
    if not path or os.path.isfile(path):
        return []
    what = "is a directory" if os.path.isdir(path) else "does not exist"
    return [
        f"custom_reward_function.path={path!r} {what}; point it at the .py file defining the reward function"
    ]


def tokenizer_source(cfg: PPOTrainerConfig) -> tuple[str, str]:
    """(config key, folder) the run's tokenizer comes from."""
    if cfg.data.tokenizer:
        return "data.tokenizer", cfg.data.tokenizer
    return f"{ARR}.model.path", cfg.actor_rollout_ref.model.path


def _model_folders(cfg: PPOTrainerConfig) -> list[tuple[str, str, dict]]:
    """(key, folder, override_config) of every model the workers load from disk."""
    folders = [
        (f"{ARR}.model.path", cfg.actor_rollout_ref.model.path, cfg.actor_rollout_ref.model.override_config)
    ]
    if uses_critic(cfg):
        folders.append(("critic.model.path", cfg.critic.model.path, cfg.critic.model.override_config))
    if cfg.reward_model.enable and cfg.reward_model.model.path:
        rm = cfg.reward_model.model
        folders.append(("reward_model.model.path", rm.path, rm.override_config))
    return folders


def check_models(cfg: PPOTrainerConfig) -> list[str]:
    """Weights present and whole in every model folder (after validate: the folders hold config.json)."""
    problems, seen = [], set()
    for key, path, _ in _model_folders(cfg):
        if path in seen or not os.path.isfile(os.path.join(path, "config.json")):
            continue
        seen.add(path)
        problems += weight_problems(path, key)
    key, path = tokenizer_source(cfg)
    if os.path.isdir(path):
        problem = tokenizer_files_problem(path, key)
        problems += [problem] if problem else []
    return problems


def check_model_fit(cfg: PPOTrainerConfig, tokenizer, on_gpu: bool) -> list[str]:
    """The tokenizer's ids within the actor's vocabulary; prompt + response within every model's
    positions; the vLLM engine's own argument rules."""
    key, path = tokenizer_source(cfg)
    models = [(k, p, read_config(p) | dict(over or {})) for k, p, over in _model_folders(cfg)]
    actor_key, _, actor = models[0]
    problems = tokenizer_problems(tokenizer, key, path, actor.get("vocab_size"), actor_key)
    r = cfg.actor_rollout_ref.rollout
    seq = cfg.data.max_prompt_length + r.response_length
    for model_key, model_path, config in models:
        limit = max_positions(config)
        if limit is not None and seq > limit:
            problems.append(
                f"data.max_prompt_length + {ARR}.rollout.response_length = {cfg.data.max_prompt_length} + "
                f"{r.response_length} = {seq} tokens is longer than the model's {limit} positions "
                f"({model_key}={model_path!r}, max_position_embeddings); shorten them to fit {limit}"
            )
    if r.name == "vllm":
        problems += check_engine_args(r, actor, actor_key, on_gpu)
    return problems + check_heads(cfg, models)


def _sources_problem(dataset: RLHFDataset, files_key: str, reward_fn_key: str) -> str | None:
    sources = [row[reward_fn_key] for row in dataset.rows]
    missing = missing_scorers(sources)
    if not missing:
        return None
    first = next(i for i, s in enumerate(sources) if s == missing[0])
    return (
        f"{files_key}: no reward scorer for {reward_fn_key} {missing} (e.g. {dataset.where(first)}); "
        f"built-in scorers know {known_sources()}: set custom_reward_function.path and .name"
    )


def check_datasets(cfg: PPOTrainerConfig, train: RLHFDataset, val: RLHFDataset | None) -> list[str]:
    problem = check_batch_fits(train, cfg.data.train_batch_size, "data.train_batch_size", "data.train_files")
    problems = [problem] if problem else []
    if not cfg.custom_reward_function.path and not cfg.reward_model.enable:
        for files_key, dataset in (("data.train_files", train), ("data.val_files", val)):
            found = dataset is not None and _sources_problem(dataset, files_key, cfg.data.reward_fn_key)
            problems += [found] if found else []
    return problems


def joins_cluster(cfg: PPOTrainerConfig) -> bool:
    return bool(cfg.ray_kwargs.ray_init.address or os.environ.get("RAY_ADDRESS"))


def check_machine(cfg: PPOTrainerConfig, use_gpu: bool, num_gpus: int) -> list[str]:
    """A local Ray's one node, known before Ray starts (a cluster is checked after joining)."""
    if joins_cluster(cfg):
        return []
    t = cfg.trainer
    node = local_node(cfg.ray_kwargs.ray_init.num_cpus, num_gpus)
    return capacity_problems(t.nnodes, t.n_gpus_per_node, use_gpu, [node], local=True)


def check_cluster(cfg: PPOTrainerConfig, use_gpu: bool) -> list[str]:
    """The nodes of the Ray cluster this process is connected to, before any worker starts."""
    t = cfg.trainer
    return capacity_problems(t.nnodes, t.n_gpus_per_node, use_gpu, cluster_nodes(), local=False)
