"""verl.experimental.agent_loop.tool_agent_loop: ToolAgentLoop and AgentData (agent_loop/tool_agent.py,
agent_data.py)."""

from verl_lite.agent_loop.agent_data import AgentData
from verl_lite.agent_loop.tool_agent import ToolAgentLoop

__all__ = ["AgentData", "ToolAgentLoop"]
