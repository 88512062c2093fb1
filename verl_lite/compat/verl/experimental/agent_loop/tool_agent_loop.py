"""verl.experimental.agent_loop.tool_agent_loop: ToolAgentLoop and AgentData (agent_loop/tool_agent.py,
agent_data.py), and verl's AgentState enum. verl_lite's ToolAgentLoop is one run() without verl's
state-machine hooks; a subclass that overrides or calls them is refused at start-up (verl_hooks.py)."""

from enum import Enum

from verl_lite.agent_loop.agent_data import AgentData
from verl_lite.agent_loop.tool_agent import ToolAgentLoop


class AgentState(Enum):
    """verl 0.9.0's states of its ToolAgentLoop; verl_lite's loop does not step through them."""

    PENDING = "pending"
    GENERATING = "generating"
    PROCESSING_TOOLS = "processing_tools"
    TERMINATED = "terminated"


__all__ = ["AgentData", "AgentState", "ToolAgentLoop"]
