"""Agent loops a user might write, named by dotted path in agent_loop_config_path."""

from verl_lite.agent_loop.base import AgentLoopBase, AgentLoopOutput


class EchoLoop(AgentLoopBase):
    """Two generations; between them the text `suffix` (from its YAML entry) is inserted."""

    async def run(self, sampling_params, **kwargs):
        prompt = list(kwargs["prompt_ids"])
        first = await self.server_manager.generate(
            prompt_ids=prompt, sampling_params={**sampling_params, "max_tokens": 3}
        )
        inserted = self.tokenizer(self.loop_kwargs.get("suffix", "!"), add_special_tokens=False)["input_ids"]
        second = await self.server_manager.generate(
            prompt_ids=prompt + first.token_ids + inserted,
            sampling_params={**sampling_params, "max_tokens": 2},
        )
        ids = first.token_ids + inserted + second.token_ids
        mask = [1] * len(first.token_ids) + [0] * len(inserted) + [1] * len(second.token_ids)
        logps = first.log_probs + [0.0] * len(inserted) + second.log_probs
        return AgentLoopOutput(prompt, ids, mask, logps, num_turns=4, reward_score=float(len(ids)))


class NotALoop:
    pass
