"""Files a verl user writes, importing from verl's paths (run here without verl installed)."""

import asyncio
import json

from verl.experimental.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.interactions.base import BaseInteraction
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.reward_score import gsm8k


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """verl's tool-call shaping example, in short: verl's gsm8k scorer, plus 0.1 for a tool call."""
    return gsm8k.compute_score(solution_str, ground_truth) + (0.1 if "<tool_call>" in solution_str else 0.0)


class RateLimitedTool(BaseTool):
    """A tool modelled on verl's gsm8k tool, rate-limiting its backend with a semaphore made here."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema):
        super().__init__(config, tool_schema)
        assert isinstance(tool_schema, OpenAIFunctionToolSchema)
        self.rendered = json.dumps(tool_schema.model_dump(exclude_unset=True, exclude_none=True))
        self.semaphore = asyncio.Semaphore(config.get("max_concurrency", 4))
        self.inside = self.most_inside = 0

    async def execute(self, instance_id: str, parameters: dict, **kwargs) -> tuple[ToolResponse, float, dict]:
        async with self.semaphore:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            await asyncio.sleep(0.05)
            self.inside -= 1
        return ToolResponse(text=f"{self.name}: {parameters.get('answer')}"), 0.0, {}


class EchoInteraction(BaseInteraction):
    async def generate_response(self, instance_id, messages, **kwargs):
        return True, f"you said {messages[-1]['content']}", 1.0, {}


@register("verl_style_agent")
class OneTurnLoop(AgentLoopBase):
    async def run(self, sampling_params, **kwargs) -> AgentLoopOutput:
        out = await self.server_manager.generate(
            prompt_ids=kwargs["prompt_ids"], sampling_params=sampling_params
        )
        n = len(out.token_ids)
        return AgentLoopOutput(kwargs["prompt_ids"], out.token_ids, [1] * n, out.log_probs, num_turns=2)
