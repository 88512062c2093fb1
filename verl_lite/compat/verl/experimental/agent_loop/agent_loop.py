"""verl.experimental.agent_loop.agent_loop: AgentLoopBase, AgentLoopOutput, AgentLoopMetrics, the
constructor's wrappers and `register` (agent_loop/base.py, verl_args.py, registry.py)."""

from verl_lite.agent_loop.base import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl_lite.agent_loop.registry import register
from verl_lite.agent_loop.verl_args import DictConfigWrap, ToolListWrap

__all__ = [
    "AgentLoopBase",
    "AgentLoopMetrics",
    "AgentLoopOutput",
    "DictConfigWrap",
    "ToolListWrap",
    "register",
]
