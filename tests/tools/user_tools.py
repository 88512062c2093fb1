"""Tool classes a user might write, named by dotted path in the tests' tool YAMLs."""

import asyncio
import time
import zlib

from verl_lite.tools.base import BaseTool, ToolResponse
from verl_lite.tools.calculator import CalculatorTool


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


class BadRewardTool(EchoTool):
    """calc_reward raises: its instance must be released all the same."""

    async def calc_reward(self, instance_id, **kwargs):
        raise RuntimeError("the grader is down")


class BadCreateTool(BaseTool):
    """create raises: the model is told why."""

    async def create(self, instance_id=None, **kwargs):
        raise ConnectionError("sandbox quota exceeded")


class SleepTool(BaseTool):
    """Blocks its thread for `seconds`: blocking code, so a plain method (run in a thread of its own)."""

    def execute(self, instance_id, parameters, **kwargs):
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
    """execute is a plain method (blocking code: run in a thread); the others async."""

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


class NoExecuteTool:
    """Not a tool: it has no execute."""

    def __init__(self, config, tool_schema):
        pass

    async def create(self, instance_id=None, **kwargs):
        return instance_id, ToolResponse()

    async def calc_reward(self, instance_id, **kwargs):
        return 0.0

    async def release(self, instance_id, **kwargs):
        return None


class SemaphoreTool(BaseTool):
    """Rate-limits its calls with an asyncio.Semaphore made in __init__, as a tool calling an API does;
    records the most calls inside at once."""

    def __init__(self, config, tool_schema):
        super().__init__(config, tool_schema)
        self.limit = asyncio.Semaphore(int(config.get("limit", 4)))
        self.inside = self.most_inside = 0

    async def execute(self, instance_id, parameters, **kwargs):
        async with self.limit:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            await asyncio.sleep(0.05)
            self.inside -= 1
        return ToolResponse(text="ok"), None, None


class LockTool(BaseTool):
    """Serialises its calls with an asyncio.Lock made in __init__; counts the calls."""

    def __init__(self, config, tool_schema):
        super().__init__(config, tool_schema)
        self.lock = asyncio.Lock()
        self.count = 0

    async def execute(self, instance_id, parameters, **kwargs):
        async with self.lock:
            await asyncio.sleep(0.01)
            self.count += 1
            return ToolResponse(text=str(self.count)), None, None


class BrokenInitTool(BaseTool):
    def __init__(self, config, tool_schema):
        raise RuntimeError("cannot reach the license server")


class StrTool(BaseTool):
    """Returns a str where verl's contract asks for a ToolResponse: every call fails."""

    async def execute(self, instance_id, parameters, **kwargs):
        return f"the answer is {parameters.get('text')}", None, None


class LongTailCalculatorTool(CalculatorTool):
    """The tool demo's calculator with a long-tailed latency (scripts/bench_async.py --case tool_tail),
    as code-execution and search tools answer: most calls in `fast_s`, the one in `every` whose
    expression hashes to 0 in `slow_s` (the same expression is as slow every time). Awaited: other
    trajectories' calls and generations go on meanwhile."""

    def __init__(self, config, tool_schema):
        config = dict(config)
        self.slow_s, self.fast_s = float(config.pop("slow_s", 2.0)), float(config.pop("fast_s", 0.02))
        self.every = int(config.pop("every", 8))
        super().__init__(config, tool_schema)

    async def execute(self, instance_id, parameters, **kwargs):
        slow = zlib.crc32(str(parameters.get("expression")).encode()) % self.every == 0
        await asyncio.sleep(self.slow_s if slow else self.fast_s)
        return await super().execute(instance_id, parameters, **kwargs)
