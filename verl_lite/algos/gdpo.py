"""GDPO (arXiv 2601.05242, verl 0.9.1's `adv_estimator=gdpo`): GRPO per reward component, then summed.

A reward function that returns several components (a dict: `{"score": ..., "accuracy_reward": ...,
"format_reward": ...}`) names them in `algorithm.gdpo_reward_keys`; the trainer keeps what the reward
manager returned beside the score, per response (verl's reward_extra_info, trainer/ppo_phases.py). Then

    A_k = GRPO(r_k)  per key k, within each prompt's group (std-normalised unless
                     algorithm.norm_adv_by_std_in_grpo=False; a group of one: mean 0, std 1)
    A   = whiten(sum_k w_k A_k)  over the batch's response tokens (w: algorithm.gdpo_reward_weights,
                                 1 each when null)

so a dominant component cannot drown a weaker one, as it would in GRPO on their sum. The components
are read as the reward manager returned them (before any KL penalty in the reward, as in verl). A key
the reward function did not return stops the run with one line (the trainer's adv phase reports an
estimator's ValueError so, with the phase and step) naming it and the keys it did return.
"""

from __future__ import annotations

import numpy as np
import torch

from verl_lite.algos.advantages import NORM_BY_STD, compute_grpo_outcome_advantage
from verl_lite.algos.masked import last_policy_token, masked_whiten
from verl_lite.algos.registry import ADV_ESTIMATORS, REWARD_EXTRA

KEYS, WEIGHTS = "algorithm.gdpo_reward_keys", "algorithm.gdpo_reward_weights"


def config_problems(cfg) -> list[str]:
    """Before Ray: the keys are listed, once each, and the weights (when set) match them one to one."""
    keys, weights = cfg.algorithm.gdpo_reward_keys, cfg.algorithm.gdpo_reward_weights
    if not keys:
        return [
            f"algorithm.adv_estimator=gdpo needs {KEYS}: the keys of the reward components your "
            "compute_score returns in its dict, e.g. +algorithm.gdpo_reward_keys='[accuracy_reward, format_reward]'"
        ]
    if len(set(keys)) != len(keys):
        return [f"{KEYS}={list(keys)} names a key twice; list each reward component once"]
    if weights is not None and len(weights) != len(keys):
        return [
            f"{WEIGHTS}={list(weights)} has {len(weights)} weights for the {len(keys)} keys of "
            f"{KEYS}={list(keys)}; give one weight per key, or null for 1 each"
        ]
    return []


def component_scores(extra_info, keys, batch_size: int) -> list[torch.Tensor]:
    """(bs,) float scores of each key, from each response's extra info (one dict per row)."""
    if extra_info is None or len(extra_info) != batch_size:
        raise ValueError(f"{KEYS}: the batch has no reward extra info to read the components from")
    scores = []
    for key in keys:
        missing = next((row for row in extra_info if key not in row), None)
        if missing is not None:
            raise ValueError(
                f"{KEYS}: the reward function returned no {key!r} (it returned {sorted(missing)}); "
                f"return it in compute_score's dict"
            )
        try:
            values = np.asarray([row[key] for row in extra_info], dtype=np.float32)
        except (TypeError, ValueError):
            raise ValueError(
                f"{KEYS}: the reward component {key!r} must be a number for every response"
            ) from None
        scores.append(torch.from_numpy(values))
    return scores


def gdpo_metrics(cfg, batch) -> dict[str, float]:
    """verl's gdpo/{key}/mean, std, max and min of each component over the batch."""
    keys = cfg.algorithm.gdpo_reward_keys
    scores = component_scores(batch.non_tensor_batch.get(REWARD_EXTRA), keys, len(batch))
    stats = {"mean": np.mean, "std": np.std, "max": np.max, "min": np.min}
    return {
        f"gdpo/{key}/{name}": float(fn(values.numpy()))
        for key, values in zip(keys, scores, strict=True)
        for name, fn in stats.items()
    }


@ADV_ESTIMATORS.register(
    "gdpo",
    inputs=("index", REWARD_EXTRA),
    config_keys=(*NORM_BY_STD, KEYS, WEIGHTS),
    problems=config_problems,
    metrics=gdpo_metrics,
    group_of_one="mean 0 and std 1 per component: its advantage is its whitened weighted score",
)
@torch.no_grad()
def compute_gdpo_outcome_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    index: np.ndarray,  # (bs,) group ids
    reward_extra_info: np.ndarray,  # (bs,) dicts: each response's extra info, the components among them
    gdpo_reward_keys=None,
    gdpo_reward_weights=None,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The module docstring's A on every response token; returns = advantages (outcome only)."""
    bs = token_level_rewards.shape[0]
    weights = list(gdpo_reward_weights) if gdpo_reward_weights is not None else [1.0] * len(gdpo_reward_keys)
    last = last_policy_token(response_mask)
    total = torch.zeros_like(token_level_rewards, dtype=torch.float32)
    for weight, scores in zip(
        weights, component_scores(reward_extra_info, gdpo_reward_keys, bs), strict=True
    ):
        per_token = torch.zeros_like(total)
        per_token[torch.arange(bs), last] = scores.to(per_token.dtype)  # GRPO sums over the tokens
        advantage, _ = compute_grpo_outcome_advantage(
            per_token, response_mask, index, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, epsilon=epsilon
        )
        total += float(weight) * advantage
    advantages = masked_whiten(total, response_mask) * response_mask
    return advantages, advantages
