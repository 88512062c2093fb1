"""The GSM8K answer tool (verl's `Gsm8kTool`, schema name `calc_gsm8k_reward`).

The model submits an answer; the tool scores it against the trajectory's ground truth (the row's
`extra_info.tools_kwargs.calc_gsm8k_reward.create_kwargs.ground_truth`) with GSM8K's flexible rule
and tells the model `Current parsed answer='...' reward=...`. Its step reward is 0 when the
submission improves on the best so far in this trajectory and -0.05 otherwise (verl's penalty for
resubmitting without improvement); `calc_reward` is the score of the last submission.
"""

from __future__ import annotations

import uuid
from typing import Any

from verl_lite.reward import gsm8k
from verl_lite.tools.base import BaseTool, ToolResponse, refuse_unread_keys

NO_IMPROVEMENT_PENALTY = -0.05


class Gsm8kTool(BaseTool):
    def __init__(self, config: dict, tool_schema):
        refuse_unread_keys(config, (), "GSM8K tool")
        super().__init__(config, tool_schema)
        self._instances: dict[str, dict[str, Any]] = {}

    async def create(
        self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs
    ) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid.uuid4())
        if ground_truth is None:
            ground_truth = (kwargs.get("create_kwargs") or {}).get("ground_truth")
        if ground_truth is None:
            raise ValueError(
                "no ground truth: the row's extra_info.tools_kwargs.calc_gsm8k_reward.create_kwargs "
                "must hold ground_truth"
            )
        self._instances[instance_id] = {"response": "", "ground_truth": str(ground_truth), "reward": 0.0}
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs):
        answer = parameters.get("answer", "")
        answer = answer if isinstance(answer, str) else str(answer)
        state = self._instances[instance_id]
        state["response"] = answer if answer.startswith("#### ") else "#### " + answer
        reward = await self.calc_reward(instance_id)
        step_reward = 0.0 if reward > state["reward"] else NO_IMPROVEMENT_PENALTY
        state["reward"] = reward
        return ToolResponse(text=f"Current parsed {answer=} {reward=}"), step_reward, {}

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        state = self._instances[instance_id]
        return gsm8k.compute_score(state["response"], state["ground_truth"], method="flexible")

    async def release(self, instance_id: str, **kwargs) -> None:
        self._instances.pop(instance_id, None)
