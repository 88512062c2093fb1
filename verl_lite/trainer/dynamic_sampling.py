"""DAPO dynamic sampling (`algorithm.filter_groups`): keep only groups that carry a learning signal.

A group (the n responses to one prompt, sharing a uid) whose metric is equal for every response has
zero advantage under group baselines (GRPO, RLOO, ...): it costs compute and teaches nothing. The
trainer drops such groups and generates more batches until it has train_batch_size prompts.

Metrics, as in verl 0.9.1 (its V1 trainer's replay buffer) and verl's DAPO recipe:
  reward            (verl 0.9.1's default) the canonical pre-KL reward: the sum of token_level_scores
  seq_reward        the same (the DAPO recipe's name)
  seq_final_reward  sum of token_level_rewards (equal to seq_reward at filtering time: the in-reward
                    KL penalty needs log-probs, which are computed only for the kept groups)
  any other name    the reward function's extra info of that name (acc, score, ...; "score" falls
                    back to seq_reward when the reward function returns a plain number, as the
                    recipe reads it)

A metric the reward function does not return, and a filter that keeps too few groups, are known only
once a batch is scored: both are RunErrors, which main_ppo reports as one line naming the key and the
fix (verl's DAPO trainer stops there with a KeyError).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import torch

from verl_lite.errors import RunError
from verl_lite.protocol import DataProto


def sequence_metric(batch: DataProto, extra: dict[str, list], metric: str) -> np.ndarray:
    """The per-response value of `metric` (see the module docstring)."""
    if metric in ("reward", "seq_reward"):
        return batch.batch["token_level_scores"].sum(-1).numpy()
    if metric == "seq_final_reward":
        return batch.batch["token_level_rewards"].sum(-1).numpy()
    if metric in extra:
        return np.asarray(extra[metric], dtype=np.float64)
    if metric == "score":
        return batch.batch["token_level_scores"].sum(-1).numpy()
    raise RunError(
        f"algorithm.filter_groups.metric={metric!r}: the reward function returns no {metric!r} "
        f"(it returns {sorted(extra) or 'a plain number'}); use reward, or a reward function that "
        f"returns a dict with {metric!r}"
    )


def kept_group_rows(uids: np.ndarray, values: np.ndarray) -> tuple[list[int], int, int]:
    """(rows of the groups whose values are not all equal, in order; kept groups; total groups).

    A group of one response is kept, as in verl's DAPO trainer (`std > 0 or len == 1`): with
    rollout.n=1 the filter keeps every prompt."""
    groups: OrderedDict[object, list[int]] = OrderedDict()
    for i, uid in enumerate(uids):
        groups.setdefault(uid, []).append(i)
    kept = [rows for rows in groups.values() if len(rows) == 1 or np.std(values[rows]) > 0]
    return [i for rows in kept for i in rows], len(kept), len(groups)


def collect_kept_groups(
    next_scored_batch: Callable[[int], tuple[DataProto, dict]],
    num_prompts: int,
    responses_per_prompt: int,
    metric: str,
    max_num_gen_batches: int,
) -> tuple[DataProto, dict[str, float]]:
    """Draw scored batches (`next_scored_batch(i)` for the i-th, from 0) until `num_prompts` groups
    with differing `metric` are kept; the first num_prompts of them, and verl's counters."""
    kept_parts, num_kept, num_groups, num_gen = [], 0, 0, 0
    while num_kept < num_prompts:
        if 0 < max_num_gen_batches <= num_gen:
            raise RunError(
                f"algorithm.filter_groups: {num_gen} generation batches kept only {num_kept} of the "
                f"{num_prompts} prompts of data.train_batch_size (the others' {metric} was equal across "
                "their group); raise algorithm.filter_groups.max_num_gen_batches (0: no limit), or use "
                "prompts whose responses differ"
            )
        batch, extra = next_scored_batch(num_gen)
        num_gen += 1
        rows, kept, total = kept_group_rows(
            batch.non_tensor_batch["uid"], sequence_metric(batch, extra, metric)
        )
        kept_parts.append(batch[torch.tensor(rows, dtype=torch.long)])
        num_kept, num_groups = num_kept + kept, num_groups + total
    metrics = {
        "train/num_gen_batches": num_gen,
        "train/num_kept_groups": num_kept,
        "train/kept_group_ratio": num_kept / num_groups,
    }
    return DataProto.concat(kept_parts)[: num_prompts * responses_per_prompt], metrics
