"""verl.experimental.agent_loop.agent_loop: AgentLoopBase, AgentLoopOutput and `register` (agent_loop/)."""

from verl_lite.agent_loop.base import AgentLoopBase, AgentLoopOutput
from verl_lite.agent_loop.registry import register

__all__ = ["AgentLoopBase", "AgentLoopOutput", "register"]
