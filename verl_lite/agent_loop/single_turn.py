"""`single_turn_agent`: one generation of at most response_length tokens, every token the model's.

A batch whose rows all run this loop takes the single-turn path the trainer always had
(Rollout.generate_tokens, n samples per request: the same samples as before agent loops existed);
this class runs a single-turn row that shares its batch with multi-turn rows.
"""

from __future__ import annotations

from verl_lite.agent_loop.base import AgentLoopBase, AgentLoopOutput, count_preempted


class SingleTurnAgentLoop(AgentLoopBase):
    async def run(self, sampling_params: dict, **kwargs) -> AgentLoopOutput:
        prompt_ids = list(kwargs["prompt_ids"])
        budget = self.rollout_config.response_length
        out = await self.server_manager.generate(
            prompt_ids=prompt_ids, sampling_params={**sampling_params, "max_tokens": budget}
        )
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=out.token_ids[:budget],
            response_mask=[1] * len(out.token_ids[:budget]),
            response_logprobs=out.log_probs[:budget],
            num_turns=2,
            metrics={"num_preempted": count_preempted(None, out)},  # verl's single_turn_agent sets it so
        )
