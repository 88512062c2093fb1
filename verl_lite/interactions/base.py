"""verl's interaction contract: a user simulator the agent loop asks for the next user turn.

Built once per worker, `cls(config: dict)` (config carries its `name`), shared by all trajectories.
Per trajectory (all async):

    start_interaction(instance_id, **interaction_kwargs)            when the trajectory starts
    generate_response(instance_id, messages, **interaction_kwargs)
        -> (should_terminate_sequence, response text, turn score, extra dict)   after each model turn
                                                                   that made no tool call
    calculate_score(instance_id, **kwargs) -> float
    finalize_interaction(instance_id, **kwargs)                     when the trajectory ends

`interaction_kwargs` is the row's `extra_info.interaction_kwargs`; its `name` picks the interaction.
`messages` is the conversation so far (the model's turns decoded for reading, not for training).
"""

from __future__ import annotations

import uuid
from typing import Any

INTERACTION_METHODS = ("start_interaction", "generate_response", "calculate_score", "finalize_interaction")


class BaseInteraction:
    def __init__(self, config: dict[str, Any]):
        self.config = dict(config)
        self.name: str = self.config.get("name", "interaction_agent")

    async def start_interaction(self, instance_id: str | None = None, **kwargs) -> str:
        return instance_id or str(uuid.uuid4())

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs
    ) -> tuple[bool, str, float, dict[str, Any]]:
        return False, "Your current result seems acceptable.", 0.8, {}

    async def calculate_score(self, instance_id: str, **kwargs) -> float:
        return 0.0

    async def finalize_interaction(self, instance_id: str, **kwargs) -> None:
        return None
