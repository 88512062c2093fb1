"""What every agent loop of a worker shares, built once per worker from the rollout config: the
tokenizer and its chat-template renderer, the tool-call parser of multi_turn.format, the tools (and the runner that calls
them with a timeout), their schemas, and the interactions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl_lite.agent_loop.tool_calls import ToolRunner
from verl_lite.agent_loop.tool_parser import ToolParser
from verl_lite.data.chat_render import ChatRenderer, is_harmony
from verl_lite.interactions.registry import build_interactions
from verl_lite.tools.registry import build_tools
from verl_lite.tools.schema import schema_dict


@dataclass
class LoopContext:
    rollout_cfg: Any  # actor_rollout_ref.rollout (multi_turn, agent, prompt_length, response_length)
    tokenizer: Any
    renderer: ChatRenderer
    parser: ToolParser
    tools: dict[str, Any] = field(default_factory=dict)
    tool_schemas: list[dict] | None = None
    interactions: dict[str, Any] = field(default_factory=dict)
    tool_runner: ToolRunner | None = None

    @property
    def tool_schema_models(self) -> list:
        """The tools' schemas as verl passes them to a parser (its pydantic models)."""
        return [t.tool_schema for t in self.tools.values()]

    @property
    def multi_turn(self):
        return self.rollout_cfg.multi_turn


def build_loop_context(
    rollout_cfg, tokenizer, chat_template_kwargs: dict | None = None, hf_model_type: str | None = None
) -> LoopContext:
    mt = rollout_cfg.multi_turn
    timeout = mt.tool_call_timeout  # every call into a tool or interaction, constructors too
    tools = build_tools(mt.tool_config_path, timeout_s=timeout) if mt.tool_config_path else {}
    interactions = (
        build_interactions(mt.interaction_config_path, timeout_s=timeout)
        if mt.interaction_config_path
        else {}
    )
    runner = ToolRunner(
        tools,
        timeout_s=mt.tool_call_timeout,
        max_response_length=mt.max_tool_response_length,
        truncate_side=mt.tool_response_truncate_side,
    )
    return LoopContext(
        rollout_cfg=rollout_cfg,
        tokenizer=tokenizer,
        renderer=ChatRenderer(tokenizer, chat_template_kwargs, is_harmony(mt.format, hf_model_type)),
        parser=ToolParser.get_tool_parser(mt.format, tokenizer),
        tools=tools,
        tool_schemas=[schema_dict(t.tool_schema) for t in tools.values()] or None,
        interactions=interactions,
        tool_runner=runner,
    )
