"""verl 0.9.0's ToolAgentLoop hooks, which verl_lite's ToolAgentLoop (tool_agent.py) does not have.

verl's loop is a state machine whose steps are methods a subclass may override (verl/experimental/
agent_loop/tool_agent_loop.py: `_handle_pending_state`, `_handle_generating_state`,
`_handle_processing_tools_state`, `_call_tool`, `_build_assistant_message`). verl_lite's loop is one
`run` that calls none of them, so a subclass's override would build and never run. `unsupported_hooks`
finds such a subclass at start-up (registry.LoopSpec.load): one that defines a hook while keeping the
inherited run, or whose own run calls a hook it does not define (verl's would, verl_lite has none).
What verl_lite's loop does honour: verl's attributes (tools, max_parallel_calls, max_*_turns,
max_tool_response_length, tool_response_truncate_side, tool_parser), set in a subclass's __init__.
"""

from __future__ import annotations

HOOKS = (
    "_handle_pending_state",
    "_handle_generating_state",
    "_handle_processing_tools_state",
    "_call_tool",
    "_build_assistant_message",
)
FIX = (
    "verl_lite's ToolAgentLoop is one run() without verl's state-machine hooks (agent_loop/tool_agent.py); "
    "put the behaviour in a tool (BaseTool.execute) or an interaction, set verl's attributes (tools, "
    "max_parallel_calls, ...) in __init__, or subclass AgentLoopBase and write run() yourself"
)


def unsupported_hooks(cls: type) -> str | None:
    """What is wrong with a ToolAgentLoop subclass that relies on verl's hooks (None: nothing)."""
    from verl_lite.agent_loop.tool_agent import ToolAgentLoop

    if not (isinstance(cls, type) and issubclass(cls, ToolAgentLoop)) or cls is ToolAgentLoop:
        return None
    own = [k for k in cls.__mro__ if issubclass(k, ToolAgentLoop) and k is not ToolAgentLoop]
    defined = [h for h in HOOKS if any(h in vars(k) for k in own)]
    if cls.run is ToolAgentLoop.run:
        if defined:
            return f"overrides verl's ToolAgentLoop method(s) {defined}, which verl_lite never calls; {FIX}"
        return None
    code = getattr(cls.run, "__code__", None)
    called = [h for h in HOOKS if code is not None and h in code.co_names and h not in defined]
    if called:
        return f"run() calls verl's ToolAgentLoop method(s) {called}, which verl_lite's ToolAgentLoop lacks; {FIX}"
    return None
