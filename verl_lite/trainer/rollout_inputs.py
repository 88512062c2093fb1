"""What the workers' rollout receives for a batch of prompts.

The prompt tensors always. When any row runs an agent loop other than `single_turn_agent` (its
`agent_name`, else rollout.agent.default_agent_loop), also what verl 0.9's RLHFDataset and trainer
hand an agent loop's run(**kwargs) (RLHFDataset.loop_rows): every column of the row, `raw_prompt`
(its chat messages, whatever data.return_raw_chat says: a loop's conversation starts there), `index`
(extra_info.index, 0 when absent, as verl), `tools_kwargs`, `interaction_kwargs`, and `agent_name`
with the default filled in; with meta_info `agent_loop`: the workers then run the multi-turn path
(agent_loop/runner.py) for the whole batch. A batch of single-turn rows takes the single-turn path,
exactly as before agent loops existed. The rows are found by their position in the dataset
(`dataset_index`, which the loops do not get).
"""

from __future__ import annotations

from verl_lite.agent_loop.registry import SINGLE_TURN
from verl_lite.data.rlhf_dataset import DATASET_INDEX
from verl_lite.protocol import DataProto

ROLLOUT_INPUTS = ["input_ids", "attention_mask", "position_ids"]


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
    non_tensors = dataset.loop_rows(batch.non_tensor_batch[DATASET_INDEX])
    non_tensors["agent_name"] = loop_names(batch, default_loop)
    meta = dict(batch.meta_info) if meta_keys is None else {k: batch.meta_info[k] for k in meta_keys}
    tensors = {k: batch.batch[k] for k in ROLLOUT_INPUTS}
    return DataProto.from_dict(tensors, non_tensors, {**meta, "agent_loop": True})
