"""verl.experimental.agent_loop: the agent-loop contract and the built-in loops (agent_loop/)."""

from verl_lite.agent_loop.base import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl_lite.agent_loop.registry import register
from verl_lite.agent_loop.single_turn import SingleTurnAgentLoop
from verl_lite.agent_loop.tool_agent import ToolAgentLoop

__all__ = [
    "AgentLoopBase",
    "AgentLoopMetrics",
    "AgentLoopOutput",
    "SingleTurnAgentLoop",
    "ToolAgentLoop",
    "register",
]
