"""Estimators built on returns over the response tokens: gae, reinforce_plus_plus and remax.

gae and reinforce_plus_plus walk the response backwards over its valid tokens. A masked token inside a
response (e.g. a tool observation in a multi-turn rollout) is skipped by gae: it neither receives a TD
error nor breaks the chain, as in verl. Same calling convention as advantages.py; each spec names the
batch tensors (values, reward_baselines) and keys (gamma, lam) its function takes.
"""

from __future__ import annotations

import torch

from verl_lite.algos.masked import masked_whiten
from verl_lite.algos.registry import ADV_ESTIMATORS


@ADV_ESTIMATORS.register(
    "gae", needs_critic=True, inputs=("values",), config_keys=("algorithm.gamma", "algorithm.lam")
)
@torch.no_grad()
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    values: torch.Tensor | None = None,  # (bs, T) critic values of the response tokens
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE (Schulman et al. 2016) over the valid tokens t_1 < ... < t_n of each response:

    delta_k = r_k + gamma V_{k+1} - V_k      (V after the last valid token = 0)
    A_k     = delta_k + gamma lam A_{k+1}
    returns = A + V  (before whitening), advantages = whiten(A) over all valid tokens of the batch.
    """
    if values is None:
        raise ValueError("algorithm.adv_estimator=gae needs critic values (the critic's compute_values)")
    mask = response_mask.to(token_level_rewards.dtype)
    values = values.to(token_level_rewards.dtype)
    next_value = torch.zeros_like(token_level_rewards[:, 0])  # (bs,) V of the next valid token
    next_adv = torch.zeros_like(next_value)  # (bs,) A of the next valid token
    advantages = torch.zeros_like(token_level_rewards)
    for t in reversed(range(token_level_rewards.shape[-1])):
        m = mask[:, t]
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
        adv = delta + gamma * lam * next_adv
        # a masked token carries the chain through unchanged
        next_adv = m * adv + (1 - m) * next_adv
        next_value = m * values[:, t] + (1 - m) * next_value
        advantages[:, t] = adv * m
    returns = (advantages + values) * mask
    advantages = masked_whiten(advantages, mask) * mask
    return advantages, returns


@ADV_ESTIMATORS.register("reinforce_plus_plus", config_keys=("algorithm.gamma",))
@torch.no_grad()
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    gamma: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (Hu 2025): G_t = r_t + gamma G_{t+1} over each response's policy tokens, whitened
    over the batch.

    A masked token (a tool's reply inside a multi-turn response, the padding after it) is skipped:
    the running return passes through it unchanged, so an outcome reward reaches every earlier turn
    (verl 0.9's rule); returns are the raw G_t, advantages the whitened ones, both 0 where masked.
    """
    mask = response_mask.to(token_level_rewards.dtype)
    returns = torch.zeros_like(token_level_rewards)
    running = torch.zeros_like(token_level_rewards[:, 0])  # (bs,)
    for t in reversed(range(token_level_rewards.shape[-1])):
        new = token_level_rewards[:, t] + gamma * running
        returns[:, t] = new * mask[:, t]
        running = mask[:, t] * new + (1 - mask[:, t]) * running
    advantages = masked_whiten(returns, mask) * mask
    return advantages, returns


@ADV_ESTIMATORS.register("remax", phases=("gen_max",), inputs=("reward_baselines",))
@torch.no_grad()
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    reward_baselines: torch.Tensor | None = None,  # (bs,) score of the greedy response to the same prompt
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax: returns-to-go G_t = sum_{k>=t} r_k (undiscounted), A_t = G_t - b with b the greedy score.

    With an outcome reward on the last token, G_t is the response's score on every valid token. The
    trainer's `gen_max` phase (the spec's) produces reward_baselines.
    """
    if reward_baselines is None:
        raise ValueError(
            "algorithm.adv_estimator=remax needs reward_baselines: the scores of a greedy rollout per prompt"
        )
    mask = response_mask.to(token_level_rewards.dtype)
    returns = (token_level_rewards * mask).flip(-1).cumsum(-1).flip(-1) * mask  # (bs, T)
    advantages = returns - reward_baselines.to(returns.dtype).unsqueeze(-1) * mask
    return advantages, returns
