"""The trainer's start-up steps (registered in verl_lite/preflight.py): the device, the trackers,
checkpointing (resume mode, what checkpoints hold, how many are kept) and the folders the run writes
into (writable, no linked checkpoint folders to rotate through), each rule the one the trainer itself
applies; and, once the data is loaded, the run's training steps (a resolve step)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from verl_lite.agent_loop.registry import SINGLE_TURN
from verl_lite.algos import ADV_ESTIMATORS
from verl_lite.config.common import prompts_per_draw, trainer_mode, updates_per_step
from verl_lite.data.rlhf_dataset import EpochSampler, RLHFDataset, agent_field
from verl_lite.engine.checkpoint import CONTENTS
from verl_lite.trainer.checkpoint import linked_step_folders, resume_problems
from verl_lite.trainer.trackers import wandb_problem
from verl_lite.trainer.tracking import logger_problems
from verl_lite.utils import device as dev
from verl_lite.utils.paths import output_folder_problem

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig

ARR = "actor_rollout_ref"
log = logging.getLogger("verl_lite.config")


def _checkpointing(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    t = cfg.trainer
    problems = resume_problems(t)
    # max_*_ckpt_to_keep positive or null: config/domains.py
    sections = [(f"{ARR}.actor.checkpoint", cfg.actor_rollout_ref.actor.checkpoint)]
    if run.critic:
        sections.append(("critic.checkpoint", cfg.critic.checkpoint))
    for prefix, ck in sections:
        for key, contents in (("save_contents", ck.save_contents), ("load_contents", ck.load_contents)):
            unknown = [c for c in contents if c not in CONTENTS]
            if unknown:
                problems.append(f"{prefix}.{key}: {unknown} not among {list(CONTENTS)}")
    # save_contents without 'model' (e.g. verl's ['hf_model']: HF exports only) is verl's meaning; a
    # resume that would load no weights is refused when it is found (checkpoint.weightless_resume)
    return problems


def _run_folders(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """The folders this run writes into: usable (a folder, writable, or creatable), found now and
    not after the workers start or at the first save; and no symbolic link among the checkpoint
    folders a saving run replaces and rotates."""
    t = cfg.trainer
    writes_local = t.save_freq > 0 or any(x in ("file", "wandb", "tensorboard") for x in t.logger)
    folders = [("trainer.default_local_dir", t.default_local_dir if writes_local else None)]
    folders += [("trainer.rollout_data_dir", t.rollout_data_dir)]
    folders += [("trainer.validation_data_dir", t.validation_data_dir)]
    problems = []
    for key, path in folders:
        problem = output_folder_problem(path) if path else None
        if problem:
            problems.append(f"{key}={path!r} {problem}; point {key} at a folder this run can write")
    if t.save_freq > 0:
        problems += [
            f"trainer.default_local_dir: {line}; this run saves there and would replace or rotate "
            "checkpoints through it: remove the link (copy the checkpoint in, or resume from it with "
            "trainer.resume_from_path)"
            for line in linked_step_folders(t.default_local_dir)
        ]
    return problems


def _generation_batch(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """data.gen_batch_size: prompts per generation batch; DAPO's dynamic sampling keeps drawing such
    batches until train_batch_size prompts are kept, so only there may it differ."""
    d = cfg.data
    if d.gen_batch_size == d.train_batch_size:
        return []
    if trainer_mode(cfg) != "sync":  # verl 0.9's async modes fetch prompts one at a time (it sets 1)
        log.info(
            "data.gen_batch_size=%s has no effect under trainer.v1.trainer_mode=%s: prompts enter the replay "
            "buffer one at a time, data.train_batch_size a step (verl 0.9 sets gen_batch_size to 1 there)",
            d.gen_batch_size,
            trainer_mode(cfg),
        )
        return []
    if not cfg.algorithm.filter_groups.enable:
        return [
            f"data.gen_batch_size={d.gen_batch_size} differs from data.train_batch_size={d.train_batch_size}: "
            "only DAPO's dynamic sampling (algorithm.filter_groups.enable=True) generates more prompts than it "
            "trains on; leave data.gen_batch_size unset"
        ]
    if d.gen_batch_size % run.world:  # positive: config/domains.py
        return [
            f"data.gen_batch_size={d.gen_batch_size} prompts cannot be split over {run.world} workers; "
            f"make it a multiple of {run.world}"
        ]
    return []


ASYNC_MODES = ("colocate_async", "separate_async")


def _trainer_mode(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """What the async modes (trainer/colocate_async.py, trainer/separate_async.py) do not serve yet
    (ReMax, agent loops on a tensor-parallel engine), and separate_async's rollout group and
    invariant, named with the fix."""
    mode = trainer_mode(cfg)
    if mode not in ASYNC_MODES:
        return []
    named, problems = f"trainer.v1.trainer_mode={mode}", []
    if "gen_max" in ADV_ESTIMATORS.spec(cfg.algorithm.adv_estimator).phases:
        problems.append(
            f"{named} with algorithm.adv_estimator={cfg.algorithm.adv_estimator}: its greedy baseline is "
            "generated beside the sampled responses of the same weights; use trainer.v1.trainer_mode=sync"
        )
    if mode == "colocate_async" and cfg.algorithm.filter_groups.enable and cfg.reward_model.enable:
        problems.append(
            f"{named} with algorithm.filter_groups.enable=True and a reward model (reward_model.enable): "
            "the filter scores groups between rounds, while the hybrid engine's rollout holds its memory "
            "on the devices the reward model shares; use trainer.v1.trainer_mode=separate_async (its "
            "rollout has devices of its own) or sync"
        )
    r = cfg.actor_rollout_ref.rollout
    if r.agent.default_agent_loop != SINGLE_TURN and r.tensor_model_parallel_size > 1:
        problems.append(_agent_loops_with_tp(named, "rollout.agent.default_agent_loop", r))
    return problems + (_separate_async(cfg, run) if mode == "separate_async" else [])


def _separate_async(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    """verl 0.9's separate_async: a rollout group with devices of its own, train_batch_size =
    parameter_sync_step x ppo_mini_batch_size, and what its per-mini-batch updates cannot serve here."""
    sa, r, t = cfg.trainer.v1.separate_async, cfg.actor_rollout_ref.rollout, cfg.trainer
    problems, named = [], "trainer.v1.trainer_mode=separate_async"
    mini, batch = cfg.actor_rollout_ref.actor.ppo_mini_batch_size, cfg.data.train_batch_size
    if batch != sa.parameter_sync_step * mini:
        problems.append(
            f"{named}: data.train_batch_size={batch} must equal trainer.v1.separate_async.parameter_sync_step="
            f"{sa.parameter_sync_step} x actor_rollout_ref.actor.ppo_mini_batch_size={mini} (one local update "
            f"per mini-batch between weight syncs, verl's invariant); set data.train_batch_size="
            f"{sa.parameter_sync_step * mini} or parameter_sync_step to train_batch_size / ppo_mini_batch_size"
        )
    for key, value in (("nnodes", r.nnodes), ("n_gpus_per_node", r.n_gpus_per_node)):
        if value is None or value < 1:
            problems.append(
                f"{named} with actor_rollout_ref.rollout.{key}={value}: the rollout group has no devices; "
                f"give it its own (e.g. actor_rollout_ref.rollout.nnodes=1 actor_rollout_ref.rollout."
                "n_gpus_per_node=1) beside trainer.n_gpus_per_node"
            )
    if not problems and run.use_gpu and t.nnodes == 1 and r.nnodes == 1:
        wanted = (t.n_gpus_per_node or 0) + r.n_gpus_per_node
        if wanted > run.num_gpus:
            problems.append(
                f"{named}: trainer.n_gpus_per_node={t.n_gpus_per_node} + actor_rollout_ref.rollout."
                f"n_gpus_per_node={r.n_gpus_per_node} GPUs on one node, which has {run.num_gpus}: no devices "
                "are left for the rollout group; lower one of them so the two fit"
            )
    if run.critic:
        problems.append(
            f"{named} with a critic (algorithm.adv_estimator={cfg.algorithm.adv_estimator}): verl computes "
            "each mini-batch's values after the previous mini-batch's critic update, which is not in "
            "verl_lite yet; use an estimator without a critic (e.g. grpo) or trainer.v1.trainer_mode="
            "colocate_async"
        )
    if cfg.algorithm.use_kl_in_reward and cfg.algorithm.kl_ctrl.type == "adaptive":
        problems.append(
            f"{named} with algorithm.use_kl_in_reward=True and algorithm.kl_ctrl.type=adaptive: verl moves "
            "the KL coefficient between the mini-batches of a step, which is not in verl_lite yet; use "
            "algorithm.kl_ctrl.type=fixed or trainer.v1.trainer_mode=colocate_async"
        )
    return problems


def _agent_loops_with_tp(named: str, what: str, rollout) -> str:
    return (
        f"{named} with agent loops ({what}) on a tensor-parallel engine (actor_rollout_ref.rollout."
        f"tensor_model_parallel_size={rollout.tensor_model_parallel_size}): the ranks of a TP group would "
        "have to end each round together, which verl_lite's multi-turn rounds do not do yet; use "
        "tensor_model_parallel_size=1 or trainer.v1.trainer_mode=sync"
    )


def check_async_rows(cfg: PPOTrainerConfig, run: Run, train: RLHFDataset, val) -> list[str]:
    """The async modes run agent loops in rounds on engines of one rank each: a training row naming
    an agent loop other than the single-turn one, with a tensor-parallel engine, is refused."""
    mode, r = trainer_mode(cfg), cfg.actor_rollout_ref.rollout
    if mode not in ASYNC_MODES or r.tensor_model_parallel_size == 1:
        return []
    default = r.agent.default_agent_loop
    rows = [
        i for i, row in enumerate(train.rows) if (agent_field(row, "agent_name") or default) != SINGLE_TURN
    ]
    if not rows or default != SINGLE_TURN:  # the default's refusal is the config's (_trainer_mode)
        return []
    name = agent_field(train.rows[rows[0]], "agent_name")
    return [_agent_loops_with_tp(f"trainer.v1.trainer_mode={mode}", f"{train.where(rows[0])}: {name!r}", r)]


def check_trainer(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    problems = dev.device_problems(cfg.trainer.device, run.num_gpus)
    problems += logger_problems(cfg.trainer.logger)
    if "wandb" in cfg.trainer.logger:
        problems += [p for p in [wandb_problem()] if p]
    problems += _generation_batch(cfg, run) + _trainer_mode(cfg, run)
    return problems + _checkpointing(cfg, run) + _run_folders(cfg, run)


def resolve_training_steps(cfg: PPOTrainerConfig, run: Run, train: RLHFDataset, val) -> list[str]:
    """The resolve step once the data is loaded (preflight.py RESOLVE_DATA): total_epochs' worth of
    whole generation batches, capped by trainer.total_training_steps. The trainer's loop runs that
    many steps and the LR schedules span them (verl fills optim.total_training_steps the same way)."""
    d, t = cfg.data, cfg.trainer
    draw = prompts_per_draw(cfg)
    if draw > len(train):
        return []  # no whole batch: the DATASETS checks name it
    steps = len(EpochSampler(len(train), draw, d.shuffle, d.seed)) * t.total_epochs
    if t.total_training_steps is not None:
        steps = min(steps, t.total_training_steps)
    # separate_async: parameter_sync_step local updates a step, the LR schedule counting each (verl's)
    cfg.actor_rollout_ref.actor.optim.total_training_steps = steps * updates_per_step(cfg)
    cfg.critic.optim.total_training_steps = steps
    return []
