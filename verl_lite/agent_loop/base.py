"""What an agent loop is, what it gets and what it returns (verl's AgentLoopBase and AgentLoopOutput).

One loop instance runs one trajectory (a prompt's i-th sample): `await run(sampling_params, **row)`
where `row` holds the row's non-tensor fields (raw_prompt, tools_kwargs, interaction_kwargs,
extra_info, index, agent_name, data_source, ...) and `prompt_ids`, the prompt's token ids exactly
as the dataset built them (chat template, tools, truncation). The loop generates through
`self.server_manager.generate(prompt_ids=..., sampling_params=...)`, which returns the sampled
token ids and their log-probs (token-in / token-out; the engine batches every trajectory's pending
request into one call, agent_loop/scheduler.py). A loop asks for one generation at a time.

It returns an AgentLoopOutput: prompt ids, the response ids (model and inserted tokens in order),
the response mask (1 = sampled by the policy, 0 = inserted), the rollout log-probs of the response
(0 at inserted tokens), the number of turns (user + assistant + 1, as verl counts), an optional
reward score for the whole trajectory (when every row of a batch has one, it replaces the reward
function, as in verl), metrics and extra fields. Everything downstream reads only response_mask.
The extra fields reach the reward function's extra_info as verl 0.9 passes them (reward/extra_info.py):
verl's `tool_rewards` (step rewards of the tool calls) and `turn_scores` (interaction scores), any
field of the loop's own, and `reward_scores` (a dict) as `rollout_reward_scores`.

A loop is built as verl 0.9.0 builds it (agent_loop/verl_args.py): `cls(trainer_config=DictConfigWrap,
server_manager=..., tokenizer=..., processor=None, dataset_cls=..., data_config=DictConfigWrap,
tools=ToolListWrap, **its YAML keys)` and nothing else, so a loop written for verl runs unchanged;
verl's helpers are here (verl_helpers.py). verl_lite's state reaches AgentLoopBase.__init__ beside the
keywords (verl_args.build_loop): `context` (the worker's tools, parser and renderer, which the built-in
loops use), `hf_model_type`; and `loop_kwargs` (the YAML keys). Text only: multimodal
inputs, a processor and routed experts are refused by name (see VerlHelpers and AgentLoopOutput.check).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from verl_lite.agent_loop.verl_args import loop_state
from verl_lite.agent_loop.verl_helpers import VerlHelpers
from verl_lite.utils.scores import finite_score, short_repr


@dataclass
class TokenOutput:
    """One generation: the sampled ids, their log-probs, and why it stopped (eos | length)."""

    token_ids: list[int]
    log_probs: list[float]
    stop_reason: str = "eos"
    # times the engine preempted this request (the rollout's TokenResult.num_preempted: 0 on hf,
    # vLLM's count); None: the engine does not say
    num_preempted: int | None = None
    routed_experts: Any = None  # verl's field; always None (no MoE router replay)
    extra_fields: dict[str, Any] = field(default_factory=dict)  # verl's field; empty


def count_preempted(so_far: int | None, output: TokenOutput) -> int:
    """A trajectory's preemption count as verl's loops keep it in metrics["num_preempted"]
    (single_turn_agent_loop.py, ToolAgentLoop._handle_generating_state): the first generation sets
    it (-1 when the engine does not say), each later one adds its count (0 if unsaid)."""
    if so_far is None:
        return output.num_preempted if output.num_preempted is not None else -1
    return so_far + (output.num_preempted or 0)


class AgentLoopMetrics(BaseModel):
    """verl's per-trajectory performance numbers (seconds; num_preempted -1: not available)."""

    generate_sequences: float = 0.0
    tool_calls: float = 0.0
    compute_score: float = 0.0
    num_preempted: int = -1


@dataclass
class AgentLoopOutput:
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None = None
    num_turns: int = 0
    reward_score: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # or verl's AgentLoopMetrics
    extra_fields: dict[str, Any] = field(default_factory=dict)
    # verl's multimodal and MoE fields: accepted empty (a loop copied from verl sets them so), refused otherwise
    routed_experts: Any = None
    multi_modal_data: dict[str, Any] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    mm_processor_output: Any = None

    def __post_init__(self):
        if isinstance(self.metrics, BaseModel):  # verl's AgentLoopMetrics
            self.metrics = self.metrics.model_dump()

    def check(self, where: str) -> None:
        """The lists line up: one mask value (and log-prob) per response token, mask values 0 or 1;
        verl's multimodal and MoE fields are empty (the trainer has nowhere to put them)."""
        unsupported = {
            "routed_experts": "router replay needs a MoE rollout, which verl_lite does not have",
            "multi_modal_data": "verl_lite trains text models only",
            "mm_processor_output": "verl_lite trains text models only",
        }
        for name, why in unsupported.items():
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, dict) or any(v is not None for v in value.values())
            ):
                raise ValueError(f"{where}: AgentLoopOutput.{name} is set, which is not supported: {why}")
        n = len(self.response_ids)
        if len(self.response_mask) != n or (
            self.response_logprobs is not None and len(self.response_logprobs) != n
        ):
            raise ValueError(
                f"{where}: {n} response ids, {len(self.response_mask)} mask values, "
                f"{None if self.response_logprobs is None else len(self.response_logprobs)} log-probs"
            )
        if any(m not in (0, 1) for m in self.response_mask):
            raise ValueError(f"{where}: response_mask holds values other than 0 and 1")
        score = self.reward_score
        if score is not None and finite_score(score) is None:  # a nan would train on nan advantages
            raise ValueError(
                f"{where}: reward_score={short_repr(score)} must be a finite number, not a bool (or None: the "
                "reward function scores it)"
            )


class AgentLoopBase(VerlHelpers, ABC):
    """Subclass and implement `run`. verl's constructor and attributes: `config` (the whole trainer
    config, an OmegaConf tree, read-only), `rollout_config` (its actor_rollout_ref.rollout),
    `server_manager` (generates for this trajectory), `tokenizer`, `processor` (None: text only),
    `dataset_cls`, `data_config`, `apply_chat_template_kwargs`, `mm_processor_kwargs`, `system_prompt`
    (verl 0.9.0's: the ids of the template's default system prompt), `turn_separator` (the ids the
    template writes after a turn's closing token), `enable_continuous_token` (False: verl_lite's config
    has no data.continuous_token), `loop` (the running event loop). verl_lite's: `context` (the
    worker's tools, interactions, parser, renderer), `hf_model_type` and `loop_kwargs` (the loop's entry
    in agent_loop_config_path besides name and _target_; verl passes them as keywords)."""

    def __init__(
        self,
        trainer_config,
        server_manager,
        tokenizer,
        processor,
        dataset_cls,
        data_config,
        **kwargs,
    ):
        self.config = trainer_config.config
        self.rollout_config = self.config.actor_rollout_ref.rollout
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.processor = processor
        self.dataset_cls = dataset_cls
        self.data_config = data_config.config
        self.apply_chat_template_kwargs = dict(self.data_config.get("apply_chat_template_kwargs") or {})
        self.mm_processor_kwargs = dict(self.data_config.get("mm_processor_kwargs") or {})
        self.context, self.hf_model_type = loop_state()  # verl_lite's, set while the runner builds it
        renderer = self.context.renderer if self.context is not None else None
        # verl 0.9.0's (agent_loop.py AgentLoopBase.__init__): Continuous Token when
        # data.continuous_token.enable and there is no processor (never here: verl 0.9.1's config has
        # no such key); then no removable system prompt and no turn separator (the ct_* helpers render
        # the turn boundaries), else the template's default system prompt and the separator after its
        # closing token (Qwen's "\n" after <|im_end|>), which verl's loops put before a tool turn
        continuous_token = self.data_config.get("continuous_token") or {}
        self.enable_continuous_token = bool(continuous_token.get("enable", False)) and processor is None
        self.continuous_token_builder = None
        if self.enable_continuous_token:
            self.system_prompt, self.turn_separator = None, []
        else:
            self.system_prompt = list(renderer.system_prefix) if renderer is not None else []
            self.turn_separator = list(renderer.turn_separator) if renderer is not None else []
        try:
            self.loop = asyncio.get_running_loop()  # verl's get_event_loop(): the loop run() runs on
        except RuntimeError:
            self.loop = None  # built outside a rollout (a test); the helpers use the running loop
        kwargs.pop("tools", None)  # verl's ToolListWrap: the built-in loops use the context's tools
        self.loop_kwargs = kwargs

    @abstractmethod
    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        """One trajectory, from the row's fields to its output."""
