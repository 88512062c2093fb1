"""Tool classes a user might write, named by dotted path in the tests' tool YAMLs."""

import asyncio
import time

from verl_lite.tools.base import BaseTool, ToolResponse


class EchoTool(BaseTool):
    """Echoes its `text` argument, prefixed by the instance's create_kwargs `prefix`; counts calls."""

    def __init__(self, config, tool_schema):
        super().__init__(config, tool_schema)
        self.state = {}
        self.released = []

    async def create(self, instance_id=None, create_kwargs=None, **kwargs):
        instance_id, _ = await super().create(instance_id)
        self.state[instance_id] = {"prefix": (create_kwargs or {}).get("prefix", ""), "calls": 0}
        return instance_id, ToolResponse()

    async def execute(self, instance_id, parameters, **kwargs):
        state = self.state[instance_id]
        state["calls"] += 1
        return ToolResponse(text=state["prefix"] + str(parameters.get("text", ""))), 0.5, {}

    async def calc_reward(self, instance_id, **kwargs):
        return float(self.state[instance_id]["calls"]) * kwargs.get("scale", 1.0)

    async def release(self, instance_id, **kwargs):
        self.released.append(instance_id)
        del self.state[instance_id]


class SleepTool(BaseTool):
    """Blocks its thread for `seconds` (a tool that hangs without ever awaiting)."""

    async def execute(self, instance_id, parameters, **kwargs):
        time.sleep(float(parameters.get("seconds", 0)))
        return ToolResponse(text="slept"), None, None


class AwaitForeverTool(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        await asyncio.Event().wait()


class StrictTool(BaseTool):
    """An execute that takes no extra keyword arguments (execute_kwargs it does not know: a TypeError)."""

    async def execute(self, instance_id, parameters):
        return ToolResponse(text="strict"), None, None


class RaisingTool(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        raise RuntimeError("the service is down")


class ImageTool(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        return ToolResponse(text="look", image=["<an image>"]), None, None


class SyncTool:
    """Not verl's contract: execute is not async."""

    def __init__(self, config, tool_schema):
        pass

    async def create(self, instance_id=None, **kwargs):
        return instance_id, ToolResponse()

    def execute(self, instance_id, parameters, **kwargs):
        return ToolResponse(text="sync"), None, None

    async def calc_reward(self, instance_id, **kwargs):
        return 0.0

    async def release(self, instance_id, **kwargs):
        return None


class BrokenInitTool(BaseTool):
    def __init__(self, config, tool_schema):
        raise RuntimeError("cannot reach the license server")


class StrTool(BaseTool):
    """Returns a str where verl's contract asks for a ToolResponse: every call fails."""

    async def execute(self, instance_id, parameters, **kwargs):
        return f"the answer is {parameters.get('text')}", None, None
