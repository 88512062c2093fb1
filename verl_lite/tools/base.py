"""verl's tool contract: what a tool class provides, and what one call returns.

A tool is built once per worker from its YAML entry, `cls(config: dict, tool_schema: OpenAIFunctionToolSchema)`,
and serves every trajectory of that worker. Per trajectory the agent loop calls (all async):

    create(instance_id=None, create_kwargs=...)   -> (instance_id, ToolResponse)   first use in a trajectory
    execute(instance_id, parameters, **execute_kwargs, agent_data=AgentData)
                                                  -> (ToolResponse, step reward | None, metrics | None)
    calc_reward(instance_id, **calc_reward_kwargs) -> float                          at the trajectory's end
    release(instance_id, **release_kwargs)                                          at the trajectory's end

`create_kwargs` (and the others) are the row's `extra_info.tools_kwargs.<tool name>.*` (verl's data
fields); `create` receives them as one keyword `create_kwargs`, as verl's agent loop passes them.
`parameters` is the JSON object the model wrote as the call's arguments. `agent_data` is verl's
AgentData (agent_loop/agent_data.py), passed when `execute` takes it (by name or **kwargs). A tool keeps its
per-trajectory state under the instance id (calls of different trajectories run concurrently).

Async methods run on the worker's one tool loop (agent_loop/tool_loop.py), as in verl: asyncio
objects made in `__init__` (a Semaphore rate-limiting an API, a Lock) work across calls, and an
async method must not block. Blocking code goes in a plain `def` method (verl_lite's extension of
verl's contract): it runs in a thread of its own, so it stalls no other call.

A user's tool subclasses `BaseTool` (or only provides the same methods) and is named in the YAML by
its dotted path. Anything a call raises becomes an error message to the model (agent_loop/), never
an exception in the trainer.
"""

from __future__ import annotations

import uuid
from typing import Any

from verl_lite.tools.schema import OpenAIFunctionToolSchema, ToolResponse

TOOL_METHODS = ("create", "execute", "calc_reward", "release")
__all__ = ["TOOL_METHODS", "BaseTool", "ToolResponse", "refuse_unread_keys"]


def refuse_unread_keys(config: dict, reads: tuple[str, ...], what: str) -> None:
    """One line naming the keys of a tool's YAML `config` it does not read (`type` is verl's, always
    allowed), so a misspelt option is not silently ignored."""
    unknown = sorted(set(config) - {"type", *reads})
    if unknown:
        told = f"; it reads {list(reads)}" if reads else " (it reads none)"
        raise ValueError(f"config has keys {unknown} the {what} does not read{told}")


class BaseTool:
    """A tool that does nothing; subclasses override `execute` (and the others as needed)."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema):
        self.config = dict(config)
        self.tool_schema = tool_schema or self.get_openai_tool_schema()
        self.name = self.tool_schema.function.name

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return self.tool_schema

    async def create(self, instance_id: str | None = None, **kwargs) -> tuple[str, ToolResponse]:
        return instance_id or str(uuid.uuid4()), ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs
    ) -> tuple[ToolResponse, float | None, dict | None]:
        return ToolResponse(text="Updated the tool state."), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        return 0.0

    async def release(self, instance_id: str, **kwargs) -> None:
        return None
