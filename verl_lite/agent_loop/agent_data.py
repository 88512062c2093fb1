"""verl's AgentData: a trajectory's state, handed to each tool call as `execute(..., agent_data=...)`.

verl 0.9's ToolAgentLoop passes it so a tool can read the whole history (`messages`, the token
stream, the turn counts, `request_id`, `tools_kwargs`) and keep per-trajectory session data in
`extra_fields`, which verl returns as the loop's extra fields, so they reach the reward function's
extra_info (reward/extra_info.py); the built-in tool loop does the same (tool_agent.py). The fields
are verl's; `prompt_ids` is the running token stream (prompt and response so far), `response_ids`
the last generation, as in verl. Multimodal fields are always None (text models).
"""

from __future__ import annotations

from typing import Any


class AgentData:
    def __init__(
        self,
        messages: list[dict[str, Any]],
        image_data=None,
        video_data=None,
        audio_data=None,
        mm_processor_kwargs: dict[str, Any] | None = None,
        metrics: dict[str, Any] | None = None,
        request_id: str = "",
        tools_kwargs: dict[str, Any] | None = None,
    ):
        self.messages = messages
        self.image_data, self.video_data, self.audio_data = image_data, video_data, audio_data
        self.mm_processor_kwargs = mm_processor_kwargs or {}
        self.metrics = metrics if metrics is not None else {}
        self.request_id = request_id
        self.tools_kwargs = tools_kwargs or {}
        self.prompt_ids: list[int] = []
        self.mm_processor_output = None
        self.response_ids: list[int] = []
        self.response_mask: list[int] = []
        self.response_logprobs: list[float] = []
        self.turn_scores: list[float] = []
        self.tool_rewards: list[float] = []
        self.user_turns = 0
        self.assistant_turns = 0
        self.tool_calls: list = []
        self.routed_experts = None
        self.extra_fields: dict[str, Any] = {}

    def update(
        self, traj, last_ids: list[int], turns: tuple[int, int], calls: list, turn_scores, session
    ) -> None:
        """The built-in tool loop's state before a tool turn (tool_agent.Trajectory `traj`, the
        (assistant, user) turn counts, the parsed calls, the ToolSession's rewards so far)."""
        self.prompt_ids = traj.prompt_ids + traj.ids
        self.response_ids = list(last_ids)
        self.response_mask, self.response_logprobs = list(traj.mask), list(traj.log_probs)
        self.assistant_turns, self.user_turns = turns
        self.tool_calls, self.turn_scores, self.tool_rewards = calls, turn_scores, session.tool_rewards
