"""Validation: greedy (rollout.val_kwargs) generation over the whole validation set, scored by the
reward model when there is one (as in verl), else by the validation reward function; the mean
reward per data_source (`val-core/<data_source>/reward/mean@<n>`), and with agent loops verl's
`val-aux/num_turns/*`. The generations are kept for trainer.validation_data_dir and
trainer.log_val_generations when either asks for them.
"""

from __future__ import annotations

import torch

from verl_lite.agent_loop.metrics import min_max_mean
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.data.rlhf_dataset import RLHFDataset
from verl_lite.protocol import DataProto
from verl_lite.trainer.dump import Generations, record_validation
from verl_lite.trainer.metrics import compute_val_metrics
from verl_lite.trainer.ppo_phases import MODEL_INPUTS
from verl_lite.trainer.rollout_inputs import rollout_inputs
from verl_lite.trainer.tracking import Tracking
from verl_lite.trainer.worker_setup import WorkerSet


def validate(
    config: PPOTrainerConfig,
    workers: WorkerSet,
    dataset: RLHFDataset,
    reward_fn,
    tokenizer,
    step: int,
    tracker: Tracking | None,
) -> dict[str, float]:
    """Greedy (val_kwargs) generation over the whole validation set; mean reward per data_source."""
    t = config.trainer
    keep_texts = bool(t.validation_data_dir or t.log_val_generations > 0)
    val_kwargs = config.actor_rollout_ref.rollout.val_kwargs
    size = len(dataset)
    batch_size = config.data.val_batch_size or size
    default_loop = config.actor_rollout_ref.rollout.agent.default_agent_loop
    scores, sources, turns = [], [], []
    gens = Generations()
    for start in range(0, size, batch_size):
        batch = dataset.collate(list(range(start, min(start + batch_size, size))))
        prompts = rollout_inputs(batch, dataset, default_loop, meta_keys=[])
        prompts.meta_info["validate"] = True
        # each batch is scored before the next; after the last, the actor workers' next call is the
        # next step's generate or their checkpoint save (the actor's comes first), or none
        prompts.meta_info["generate_follows"] = workers.keep_rollout(True, surely_generate=True)
        group = workers.generator  # the hybrid engine, or separate_async's rollout group
        padded, pad = prompts.pad_to_divisor(group.world_size)
        gen = group.generate_sequences(padded).unpad(pad * val_kwargs.n)
        expanded = batch.repeat(val_kwargs.n, interleave=True)
        expanded.batch = {}
        expanded.union(gen)
        rewards, extra = _scores(expanded, workers, reward_fn)
        scores += rewards.sum(-1).tolist()
        turns += list(expanded.non_tensor_batch.get("__num_turns__", []))
        sources += list(expanded.non_tensor_batch["data_source"])  # data.reward_fn_key's column
        if keep_texts:
            gens.extend(Generations.decode(tokenizer, expanded, rewards.sum(-1).tolist(), extra))
    if keep_texts:
        record_validation(gens, t, tracker, step)
    # verl's val-aux/num_turns/* with agent loops
    return compute_val_metrics(scores, sources, val_kwargs.n) | min_max_mean("val-aux/num_turns", turns)


def _scores(batch: DataProto, workers: WorkerSet, reward_fn) -> tuple[torch.Tensor, dict]:
    """Validation scores and extra info: the reward model's when there is one (as in verl), else
    the rules'; an agent loop's own scores first."""
    if "rm_scores" in batch.batch:
        return batch.batch["rm_scores"], {}
    rm_wg = workers.rm_wg
    if rm_wg is None:
        return reward_fn(batch)
    padded, pad = batch.select([*MODEL_INPUTS, "response_mask"], meta_keys=[]).pad_to_divisor(
        workers.world_size
    )
    return rm_wg.compute_rm_score(padded).unpad(pad).batch["rm_scores"], {}
