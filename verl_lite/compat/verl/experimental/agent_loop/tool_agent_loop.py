"""verl.experimental.agent_loop.tool_agent_loop (agent_loop/tool_agent.py)."""

from verl_lite.agent_loop.tool_agent import ToolAgentLoop

__all__ = ["ToolAgentLoop"]
