"""KL in the reward: r_t = score_t - beta * KL_t, with beta fixed or adapted toward a target KL.

`apply_kl_penalty` is pure: it returns the penalised token rewards and the metrics verl logs
(actor/reward_kl_penalty: the batch's KL, mean over responses of each response's token mean;
actor/reward_kl_penalty_coeff: the beta used). The caller then feeds that KL to the controller:
`ctrl.update(metrics["actor/reward_kl_penalty"], n_steps=batch_size)`, as verl's trainer does.
"""

from __future__ import annotations

import numpy as np
import torch

from verl_lite.algos.kl import kl_penalty as kl_estimate
from verl_lite.algos.masked import masked_mean
from verl_lite.config.schema_trainer import KL_CTRL_TYPES


class FixedKLController:
    """A constant beta."""

    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Nothing to adapt."""


class AdaptiveKLController:
    """Ziegler et al. 2019 (sec. 2.2): beta *= 1 + clip(KL / target - 1, -0.2, 0.2) * n_steps / horizon.

    n_steps counts the samples seen since the last update (verl passes the batch size), so the
    correction per sample is independent of the batch size.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        if target_kl <= 0 or horizon <= 0:
            raise ValueError(
                f"algorithm.kl_ctrl: adaptive needs target_kl > 0 and horizon > 0, "
                f"got target_kl={target_kl}, horizon={horizon}"
            )
        self.value, self.target, self.horizon = float(init_kl_coef), float(target_kl), horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = float(np.clip(current_kl / self.target - 1.0, -0.2, 0.2))
        self.value *= 1.0 + proportional_error * n_steps / self.horizon


def kl_ctrl_problems(type: str, target_kl: float | None, horizon: int | None) -> list[str]:
    """What is wrong with algorithm.kl_ctrl (checked at start-up and when the controller is built)."""
    if type not in KL_CTRL_TYPES:
        return [f"algorithm.kl_ctrl.type={type!r} is not one of {list(KL_CTRL_TYPES)}"]
    if type == "adaptive" and (target_kl is None or horizon is None or target_kl <= 0 or horizon <= 0):
        return [
            "algorithm.kl_ctrl.type=adaptive needs algorithm.kl_ctrl.target_kl > 0 and horizon > 0, "
            f"got target_kl={target_kl}, horizon={horizon}"
        ]
    return []


KLController = FixedKLController | AdaptiveKLController


def build_kl_controller(
    type: str, kl_coef: float, target_kl: float | None = None, horizon: int | None = None
) -> KLController:
    """The controller named by algorithm.kl_ctrl.type."""
    problems = kl_ctrl_problems(type, target_kl, horizon)
    if problems:
        raise ValueError(problems[0])
    if type == "fixed":
        return FixedKLController(kl_coef)
    return AdaptiveKLController(kl_coef, target_kl, horizon)


@torch.no_grad()
def apply_kl_penalty(
    token_level_scores: torch.Tensor,  # (bs, T)
    old_log_prob: torch.Tensor,  # (bs, T) the rollout policy's log-probs
    ref_log_prob: torch.Tensor,  # (bs, T)
    response_mask: torch.Tensor,  # (bs, T)
    kl_coef: float,
    kl_penalty: str = "kl",
) -> tuple[torch.Tensor, dict[str, float]]:
    """token_level_rewards = scores - kl_coef * KL (KL by algorithm.kl_penalty, zero on padding)."""
    mask = response_mask.to(token_level_scores.dtype)
    kld = kl_estimate(old_log_prob, ref_log_prob, kl_penalty) * mask  # (bs, T)
    rewards = token_level_scores - kl_coef * kld
    per_response = masked_mean(kld, mask, dim=-1)  # (bs,)
    metrics = {
        "actor/reward_kl_penalty": float(per_response.mean()),
        "actor/reward_kl_penalty_coeff": float(kl_coef),
    }
    return rewards, metrics
