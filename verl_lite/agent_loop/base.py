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
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from verl_lite.utils.scores import finite_score, short_repr

if TYPE_CHECKING:
    from verl_lite.agent_loop.context import LoopContext


@dataclass
class TokenOutput:
    """One generation: the sampled ids, their log-probs, and why it stopped (eos | length)."""

    token_ids: list[int]
    log_probs: list[float]
    stop_reason: str = "eos"


@dataclass
class AgentLoopOutput:
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None = None
    num_turns: int = 0
    reward_score: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    extra_fields: dict[str, Any] = field(default_factory=dict)

    def check(self, where: str) -> None:
        """The lists line up: one mask value (and log-prob) per response token, mask values 0 or 1."""
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


class AgentLoopBase(ABC):
    """Subclass and implement `run`. `context` is the worker's shared state (tools, interactions,
    tokenizer, config); `server_manager` generates for this trajectory; `kwargs` are the loop's
    entry in agent_loop_config_path (besides name and _target_)."""

    def __init__(self, context: LoopContext, server_manager, **kwargs):
        self.context = context
        self.server_manager = server_manager
        self.tokenizer = context.tokenizer
        self.config = context.rollout_cfg
        self.loop_kwargs = kwargs

    @abstractmethod
    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        """One trajectory, from the row's fields to its output."""
