"""DAPO dynamic sampling (`algorithm.filter_groups`): keep only groups that carry a learning signal.

A group (the n responses to one prompt, sharing a uid) whose metric is equal for every response has
zero advantage under group baselines (GRPO, RLOO, ...): it costs compute and teaches nothing. The
trainer drops such groups and generates more batches until it has train_batch_size prompts.

Metrics, as in verl's DAPO trainer:
  seq_reward        sum of token_level_scores (the reward function's or reward model's score)
  seq_final_reward  sum of token_level_rewards (equal to seq_reward at filtering time: the in-reward
                    KL penalty needs log-probs, which are computed only for the kept groups)
  acc, score        the reward function's extra info of that name ("score" falls back to seq_reward
                    when the reward function returns a plain number)
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch

from verl_lite.protocol import DataProto


def sequence_metric(batch: DataProto, extra: dict[str, list], metric: str) -> np.ndarray:
    """The per-response value of `metric` (see the module docstring)."""
    if metric == "seq_reward":
        return batch.batch["token_level_scores"].sum(-1).numpy()
    if metric == "seq_final_reward":
        return batch.batch["token_level_rewards"].sum(-1).numpy()
    if metric in extra:
        return np.asarray(extra[metric], dtype=np.float64)
    if metric == "score":
        return batch.batch["token_level_scores"].sum(-1).numpy()
    raise KeyError(
        f"algorithm.filter_groups.metric={metric!r}: the reward function returns no {metric!r} "
        f"(it returns {sorted(extra) or 'a plain number'}); use seq_reward, or a reward function that "
        f"returns a dict with {metric!r}"
    )


def kept_group_rows(uids: np.ndarray, values: np.ndarray) -> tuple[list[int], int, int]:
    """(rows of the groups whose values are not all equal, in order; kept groups; total groups)."""
    groups: OrderedDict[object, list[int]] = OrderedDict()
    for i, uid in enumerate(uids):
        groups.setdefault(uid, []).append(i)
    kept = [rows for rows in groups.values() if len(rows) > 1 and np.std(values[rows]) > 0]
    return [i for rows in kept for i in rows], len(kept), len(groups)


def take_rows(batch: DataProto, rows: list[int]) -> DataProto:
    return batch[torch.tensor(rows, dtype=torch.long)]
