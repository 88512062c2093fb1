"""What the workers' rollout receives for a batch of prompts.

The prompt tensors always. When any row runs an agent loop other than `single_turn_agent` (its
`agent_name`, else rollout.agent.default_agent_loop), also the rows' fields verl hands its agent
loops (agent_name, tools_kwargs, interaction_kwargs, extra_info, index, data_source, reward_model)
and their chat messages as `raw_prompt` (whatever data.return_raw_chat says: a loop's conversation
starts there), with meta_info `agent_loop`: the workers then run the multi-turn path
(agent_loop/runner.py) for the whole batch. A batch of single-turn rows takes the single-turn path,
exactly as before agent loops existed.
"""

from __future__ import annotations

from verl_lite.agent_loop.registry import SINGLE_TURN
from verl_lite.protocol import DataProto

ROLLOUT_INPUTS = ["input_ids", "attention_mask", "position_ids"]
LOOP_FIELDS = (
    "agent_name",
    "tools_kwargs",
    "interaction_kwargs",
    "extra_info",
    "index",
    "data_source",
    "reward_model",
)


def loop_names(batch: DataProto, default_loop: str) -> list[str]:
    names = batch.non_tensor_batch.get("agent_name")
    return [default_loop] * len(batch) if names is None else [n or default_loop for n in names]


def runs_agent_loops(batch: DataProto, default_loop: str) -> bool:
    return any(name != SINGLE_TURN for name in loop_names(batch, default_loop))


def rollout_inputs(
    batch: DataProto, dataset, default_loop: str, meta_keys=None, agent_loops: bool = False
) -> DataProto:
    """The batch's part the rollout needs (module docstring); `dataset` holds the rows' messages.
    `agent_loops`: the agent loops' inputs whatever the rows name (the async modes' rounds run every
    row through its loop, single-turn ones too)."""
    if not agent_loops and not runs_agent_loops(batch, default_loop):
        return batch.select(ROLLOUT_INPUTS, meta_keys=meta_keys)
    non_tensors = {k: batch.non_tensor_batch[k] for k in LOOP_FIELDS if k in batch.non_tensor_batch}
    non_tensors["agent_name"] = loop_names(batch, default_loop)
    non_tensors["raw_prompt"] = dataset.messages(batch.non_tensor_batch["index"])
    meta = dict(batch.meta_info) if meta_keys is None else {k: batch.meta_info[k] for k in meta_keys}
    tensors = {k: batch.batch[k] for k in ROLLOUT_INPUTS}
    return DataProto.from_dict(tensors, non_tensors, {**meta, "agent_loop": True})
