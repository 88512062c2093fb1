"""Per-token KL estimators between the policy and the reference (Schulman's k1/k2/k3 family).

  kl  | k1        logp - logp_ref                        unbiased, high variance, can be negative
  abs             |logp - logp_ref|
  mse | k2        0.5 (logp - logp_ref)^2
  low_var_kl | k3 exp(ref - logp) - (ref - logp) - 1    non-negative; the exponent is clamped to
                                                         [-20, 20] and the result to [-10, 10] as in verl
A trailing '+' (e.g. 'low_var_kl+', 'k3+') keeps the named estimator's value in the forward pass but
takes the gradient of k2 (straight-through), as verl's kl_penalty does: k1 and k3 estimate the KL's
value without bias but not its gradient, while k2's gradient is the unbiased gradient of KL
(Schulman, "Approximating KL divergence"). 'mse+' / 'k2+' are plain k2.
"""

from __future__ import annotations

import torch

from verl_lite.config.schema_actor import KL_TYPES, is_kl_type

__all__ = ["KL_TYPES", "is_kl_type", "kl_penalty"]


def _k2(diff: torch.Tensor) -> torch.Tensor:
    return 0.5 * diff.square()


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_type: str) -> torch.Tensor:
    """The estimator named by `kl_type`, per token; same shape as the inputs."""
    if not is_kl_type(kl_type):
        raise ValueError(f"kl type {kl_type!r} is not one of {KL_TYPES} (optionally with a trailing '+')")
    base = kl_type.removesuffix("+")
    diff = logprob - ref_logprob
    if base in ("kl", "k1"):
        value = diff
    elif base == "abs":
        value = diff.abs()
    elif base in ("mse", "k2"):
        value = _k2(diff)
    else:  # low_var_kl, k3
        log_ratio = (-diff).clamp(-20, 20)
        value = (log_ratio.exp() - log_ratio - 1).clamp(-10, 10)
    if base == kl_type or base in ("mse", "k2"):
        return value
    grad_path = _k2(diff)
    return grad_path - grad_path.detach() + value.detach()
