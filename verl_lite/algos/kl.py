"""Per-token KL estimators between the policy and the reference (Schulman's k1/k2/k3 family).

  kl          k1 = logp - logp_ref                      unbiased, high variance, can be negative
  abs         |logp - logp_ref|
  mse         k2 = 0.5 (logp - logp_ref)^2
  low_var_kl  k3 = exp(ref - logp) - (ref - logp) - 1   non-negative, clamped to [-10, 10] as in verl
A trailing '+' (e.g. 'low_var_kl+') uses the estimator's value in the forward pass but the k2
gradient (straight-through), which is the unbiased gradient of KL; see Schulman, "Approximating KL".
"""

from __future__ import annotations

import torch

KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_type: str) -> torch.Tensor:
    if kl_type.endswith("+"):
        value = kl_penalty(logprob, ref_logprob, kl_type[:-1])
        grad_path = kl_penalty(logprob, ref_logprob, "mse")
        return grad_path + (value - grad_path).detach()
    diff = logprob - ref_logprob
    if kl_type in ("kl", "k1"):
        return diff
    if kl_type == "abs":
        return diff.abs()
    if kl_type in ("mse", "k2"):
        return 0.5 * diff.square()
    if kl_type in ("low_var_kl", "k3"):
        log_ratio = (-diff).clamp(-20, 20)
        return (log_ratio.exp() - log_ratio - 1).clamp(-10, 10)
    raise ValueError(f"kl type {kl_type!r} is not one of {KL_TYPES} (optionally with a trailing '+')")
