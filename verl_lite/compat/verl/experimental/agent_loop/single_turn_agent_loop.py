"""verl.experimental.agent_loop.single_turn_agent_loop (agent_loop/single_turn.py)."""

from verl_lite.agent_loop.single_turn import SingleTurnAgentLoop

__all__ = ["SingleTurnAgentLoop"]
