"""The `extra_info` a reward function gets, built as verl 0.9 builds it, so a reward file written for
verl reads the same keys here.

verl 0.9.1's naive reward managers (workers/reward_manager/naive.py, experimental/reward_loop/
reward_manager/naive.py) pass `compute_score(..., extra_info=...)` the row's extra_info (its parquet
column) and, on top of it:
  - the trajectory's agent-loop extra fields (verl's `tool_extra_fields`: the AgentLoopOutput's
    extra_fields), among them `tool_rewards` (the step reward of each tool call, in call order) and
    `turn_scores` (the interaction's score of each user turn), and any field a user's loop adds;
  - `num_turns`: user + assistant turns + 1 (verl's `__num_turns__`);
  - `rollout_reward_scores`: the rollout's reward dict (verl's `reward_scores` column): each tool's
    `calc_reward` by tool name and `user_turn_rewards` (agent_loop/tool_agent.py); {} without one.
A batch that took the single-turn path (every row single_turn_agent, agent_loop/single_turn.py) has
no agent-loop columns; verl 0.9 runs such rows through its single_turn_agent, which gives
num_turns 2 and empty turn_scores and tool_rewards, and so does this.

Unlike verl, the row's extra_info is copied, not updated in place: the batch's rows (the n samples
of a prompt share one dict) keep what the dataset gave them.
"""

from __future__ import annotations

from typing import Any

# verl 0.9.1 experimental/agent_loop/single_turn_agent_loop.py: num_turns=2, turn_scores=[], tool_rewards=[]
SINGLE_TURN = {"turn_scores": [], "tool_rewards": [], "num_turns": 2}


def build_extra_info(non_tensor_batch: dict, i: int) -> dict[str, Any]:
    """Row `i`'s extra_info for the reward function: the row's, the loop's fields, num_turns and
    rollout_reward_scores, in verl's order (the last two win over a loop field of that name)."""
    nt = non_tensor_batch
    info = dict(nt["extra_info"][i] or {}) if "extra_info" in nt else {}
    if "__num_turns__" not in nt:
        return {**info, **SINGLE_TURN, "rollout_reward_scores": {}}
    fields = nt["tool_extra_fields"][i] if "tool_extra_fields" in nt else None
    info.update(fields or {})
    info["num_turns"] = int(nt["__num_turns__"][i])
    info["rollout_reward_scores"] = nt["reward_scores"][i] if "reward_scores" in nt else {}
    return info
