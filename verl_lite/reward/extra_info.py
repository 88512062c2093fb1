"""The `extra_info` a reward function gets, built as verl 0.9.1 builds it, so a reward file written
for verl reads the same keys here.

In verl 0.9.1 every rollout runs through an agent loop, and with rule-based rewards each trajectory
is scored as it ends (AgentLoopWorker._compute_score, experimental/agent_loop/agent_loop.py) by the
reward loop's naive manager (experimental/reward_loop/reward_manager/naive.py), which passes
`compute_score(..., extra_info=...)` the row's extra_info (its parquet column) and, on top of it:
  - the trajectory's AgentLoopOutput.extra_fields (verl's `tool_extra_fields`), among them
    `tool_rewards` (the step reward of each tool call, in call order), `turn_scores` (the
    interaction's score of each user turn), any field a user's loop or its tools add, and
    `raw_prompt` (the row's chat messages, which the agent loop adds last);
  - `num_turns`: user + assistant turns + 1 (verl's `__num_turns__`);
  - `rollout_reward_scores`: the row's `reward_scores` column, which verl 0.9.1's agent loops never
    fill, so {} there. Here it holds what the tool agent loop collects (agent_loop/tool_agent.py):
    each used tool's `calc_reward` by tool name and `user_turn_rewards`, the dict verl's earlier
    multi-turn rollout filled under that name (verl 0.9.1 does not call calc_reward at all).
A batch that took the single-turn path (every row single_turn_agent, agent_loop/single_turn.py) has
no agent-loop columns; verl 0.9.1 runs such rows through its single_turn_agent, which gives
num_turns 2, empty turn_scores and tool_rewards, and raw_prompt, and so does this.

`raw_prompt` comes from the batch's column of that name, which the dataset fills while
data.return_raw_chat is True (the default; verl 0.9.1's dataset fills it whatever the key says).
Not passed, as they are verl's engine internals: the server's `global_steps`,
`min_global_steps`, `max_global_steps` and `num_cached_tokens`.

Unlike verl, the row's extra_info is copied, not updated in place: the batch's rows (the n samples
of a prompt share one dict) keep what the dataset gave them.
"""

from __future__ import annotations

from typing import Any


def build_extra_info(non_tensor_batch: dict, i: int) -> dict[str, Any]:
    """Row `i`'s extra_info for the reward function: the row's, the loop's fields, raw_prompt,
    num_turns and rollout_reward_scores, in verl's order (each wins over a loop field of its name)."""
    nt = non_tensor_batch
    info = dict(nt["extra_info"][i] or {}) if "extra_info" in nt else {}
    if "__num_turns__" in nt:
        fields = nt["tool_extra_fields"][i] if "tool_extra_fields" in nt else None
        info.update(fields or {})
        num_turns = int(nt["__num_turns__"][i])
    else:
        info.update(turn_scores=[], tool_rewards=[])  # verl 0.9.1's single_turn_agent_loop.py
        num_turns = 2
    if "raw_prompt" in nt:
        info["raw_prompt"] = nt["raw_prompt"][i]
    info["num_turns"] = num_turns
    info["rollout_reward_scores"] = nt["reward_scores"][i] if "reward_scores" in nt else {}
    return info
