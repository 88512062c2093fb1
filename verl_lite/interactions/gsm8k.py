"""The GSM8K interaction (verl's `Gsm8kInteraction`): a user who checks the model's last answer.

After each model turn it scores the last assistant message strictly (`#### <answer>`) against the
row's `interaction_kwargs.ground_truth`: a correct answer ends the episode ("Your response is
correct!"), a wrong one asks the model to reflect and try again. The turn score is that score.
"""

from __future__ import annotations

import uuid
from typing import Any

from verl_lite.interactions.base import BaseInteraction
from verl_lite.reward import gsm8k

CORRECT = "Your response is correct!"
INCORRECT = "Your response is incorrect! You need to reflect on your answer and try again."


class Gsm8kInteraction(BaseInteraction):
    def __init__(self, config: dict):
        unknown = set(config) - {"name"}
        if unknown:
            raise ValueError(
                f"config has keys {sorted(unknown)} the GSM8K interaction does not read (it reads none)"
            )
        super().__init__(config)
        self._instances: dict[str, dict[str, Any]] = {}

    async def start_interaction(
        self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs
    ) -> str:
        if ground_truth is None:
            raise ValueError("the row's extra_info.interaction_kwargs has no ground_truth")
        instance_id = instance_id or str(uuid.uuid4())
        self._instances[instance_id] = {"response": "", "ground_truth": str(ground_truth), "reward": 0.0}
        return instance_id

    async def generate_response(self, instance_id: str, messages: list[dict[str, Any]], **kwargs):
        content = next(
            (m.get("content") or "" for m in reversed(messages) if m.get("role") == "assistant"), ""
        )
        self._instances[instance_id]["response"] = content
        reward = await self.calculate_score(instance_id)
        if reward == 1.0:
            return True, CORRECT, reward, {}
        return False, INCORRECT, reward, {}

    async def calculate_score(self, instance_id: str, **kwargs) -> float:
        state = self._instances[instance_id]
        return gsm8k.compute_score(state["response"], state["ground_truth"], method="strict")

    async def finalize_interaction(self, instance_id: str, **kwargs) -> None:
        self._instances.pop(instance_id, None)
