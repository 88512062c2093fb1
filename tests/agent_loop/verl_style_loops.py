"""An agent-loop file as a verl user writes it (issue 37 part 2): imports from `verl.*`, `@register`,
verl's constructor taking `*args, **kwargs` plus a YAML key, `self.server_manager.generate(request_id,
...)`, AgentLoopOutput by keyword with AgentLoopMetrics. `AskTwiceAgentLoop` uses verl 0.9.0's
Continuous Token helpers and reads the trainer config (self.config); `AgainAgentLoop` verl 0.9.0's
`apply_chat_template(remove_system_prompt=True)` and `system_prompt`. Run by
tests/agent_loop/test_verl_loops.py (in-process) and tests/test_main_ppo_verl_loop.py (the CLI)."""

import asyncio
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop import AgentLoopBase, AgentLoopOutput
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, register
from verl.utils.profiler import simple_timer


@register("ask_twice")
class AskTwiceAgentLoop(AgentLoopBase):
    """Answers, is asked `follow_up`, answers again (verl 0.9.0's Continuous Token helpers)."""

    def __init__(self, *args, follow_up: str = "Sure?", max_answer: int = 8, **kwargs):
        super().__init__(*args, **kwargs)
        self.follow_up, self.max_answer = follow_up, max_answer
        self.response_length = self.rollout_config.response_length

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        messages = list(kwargs["raw_prompt"])
        request_id = uuid4().hex
        prompt_ids = await self.ct_build_initial_tokens(messages)
        runtime, mask, logprobs = prompt_ids, [], []
        for turn in range(2):
            output = await self.server_manager.generate(
                request_id=request_id,
                prompt_ids=runtime,
                sampling_params={**sampling_params, "max_tokens": self.max_answer},
            )
            merged, mask, logprobs = await self.ct_merge_assistant_token(
                runtime, output.token_ids, mask, logprobs, assistant_logprobs=output.log_probs
            )
            runtime = merged.token_ids
            text = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
            messages.append({"role": "assistant", "content": text})
            if turn == 0:
                previous = list(messages)
                messages.append({"role": "user", "content": self.follow_up})
                merged, mask, logprobs = await self.ct_merge_non_assistant_msg(
                    previous, messages, runtime, mask, logprobs
                )
                runtime = merged.token_ids
        response_ids = runtime[len(prompt_ids) :]
        output = AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[: self.response_length],
            response_mask=mask[: self.response_length],
            response_logprobs=logprobs[: self.response_length],
            num_turns=4,
            metrics=AgentLoopMetrics(),
        )
        output.extra_fields.update(
            {"turn_scores": [], "tool_rewards": [], "model_path": self.config.actor_rollout_ref.model.path}
        )
        return output


@register("legacy_again")
class AgainAgentLoop(AgentLoopBase):
    """verl 0.9.0's helpers: apply_chat_template, remove_system_prompt, self.loop."""

    async def run(self, sampling_params, **kwargs):
        prompt_ids = await self.apply_chat_template(list(kwargs["raw_prompt"]))
        first = await self.server_manager.generate(
            "a", prompt_ids=prompt_ids, sampling_params=sampling_params
        )
        again = await self.apply_chat_template(
            [{"role": "user", "content": "Again."}], remove_system_prompt=True
        )
        ids = list(first.token_ids) + again
        second = await self.server_manager.generate(
            "a", prompt_ids=prompt_ids + ids, sampling_params=sampling_params
        )
        mask = [1] * len(first.token_ids) + [0] * len(again) + [1] * len(second.token_ids)
        logprobs = list(first.log_probs) + [0.0] * len(again) + list(second.log_probs)
        ids += second.token_ids
        n = self.rollout_config.response_length
        extra = {"system_prompt_len": len(self.system_prompt), "processor": self.processor}
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=ids[:n],
            response_mask=mask[:n],
            response_logprobs=logprobs[:n],
            num_turns=4,
            metrics={},
            extra_fields=extra,
        )


class ExactSignatureLoop(AgentLoopBase):
    """verl 0.9.0's constructor parameters listed one by one, no **kwargs (verl passes exactly these),
    and the path verl 0.9.0's ToolAgentLoop takes without Continuous Token: `enable_continuous_token`
    False, `self.turn_separator` put before an inserted turn, the tool turn timed into
    metrics["tool_calls"] with verl's simple_timer."""

    def __init__(
        self, trainer_config, server_manager, tokenizer, processor, dataset_cls, data_config, tools=None
    ):
        super().__init__(trainer_config, server_manager, tokenizer, processor, dataset_cls, data_config)
        self.tool_list = tools.tools if tools else []

    async def run(self, sampling_params, **kwargs):
        metrics = {}
        if self.enable_continuous_token:
            raise AssertionError("verl_lite's config has no data.continuous_token")
        prompt_ids = await self.apply_chat_template(list(kwargs["raw_prompt"]))
        first = await self.server_manager.generate(
            request_id="r", prompt_ids=prompt_ids, sampling_params=sampling_params
        )
        with simple_timer("tool_calls", metrics):
            await asyncio.sleep(0.05)
        tool = await self.apply_chat_template([{"role": "tool", "content": "42"}], remove_system_prompt=True)
        inserted = self.turn_separator + tool
        second = await self.server_manager.generate(
            request_id="r",
            prompt_ids=prompt_ids + first.token_ids + inserted,
            sampling_params=sampling_params,
        )
        ids = first.token_ids + inserted + second.token_ids
        mask = [1] * len(first.token_ids) + [0] * len(inserted) + [1] * len(second.token_ids)
        n = self.rollout_config.response_length
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=ids[:n],
            response_mask=mask[:n],
            num_turns=4,
            metrics=metrics,
            extra_fields={"turn_separator": list(self.turn_separator)},
        )
