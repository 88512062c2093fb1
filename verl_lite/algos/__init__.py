"""Pure tensor math of RL for LMs: advantages, policy and value losses, KL, loss aggregation.

Nothing here knows about Ray, FSDP or configs beyond plain arguments; every function is tested
against numbers worked out by hand. Importing the package registers the estimators and losses, each
with its spec (registry.py).
"""

from verl_lite.algos import (  # noqa: F401  (registers)
    advantages,
    gdpo,
    policy_loss,
    policy_loss_cov,
    policy_loss_dppo,
    policy_loss_pg,
    returns,
    token_baseline,
)
from verl_lite.algos.registry import ADV_ESTIMATORS, POLICY_LOSSES

__all__ = ["ADV_ESTIMATORS", "POLICY_LOSSES"]
