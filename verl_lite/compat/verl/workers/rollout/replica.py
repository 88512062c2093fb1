"""verl.workers.rollout.replica: TokenOutput, what `server_manager.generate` returns (agent_loop/base.py)."""

from verl_lite.agent_loop.base import TokenOutput

__all__ = ["TokenOutput"]
