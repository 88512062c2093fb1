"""Agent loops a user might write, named by dotted path in agent_loop_config_path."""

from verl_lite.agent_loop.base import AgentLoopBase, AgentLoopOutput
from verl_lite.agent_loop.tool_agent import ToolAgentLoop


class EchoLoop(AgentLoopBase):
    """`turns` generations of at most `tokens` tokens, the text `suffix` inserted after each but the
    last (its YAML entry's keys); reward_score: the response's length."""

    async def run(self, sampling_params, **kwargs):
        turns, tokens = int(self.loop_kwargs.get("turns", 2)), int(self.loop_kwargs.get("tokens", 3))
        inserted = self.tokenizer(self.loop_kwargs.get("suffix", "!"), add_special_tokens=False)["input_ids"]
        prompt, ids, mask, logps = list(kwargs["prompt_ids"]), [], [], []
        for turn in range(turns):
            out = await self.server_manager.generate(
                prompt_ids=prompt + ids, sampling_params={**sampling_params, "max_tokens": tokens}
            )
            ids, mask, logps = ids + out.token_ids, mask + [1] * len(out.token_ids), logps + out.log_probs
            if turn < turns - 1:
                ids, mask, logps = ids + inserted, mask + [0] * len(inserted), logps + [0.0] * len(inserted)
        return AgentLoopOutput(prompt, ids, mask, logps, num_turns=2 * turns, reward_score=float(len(ids)))


class NotALoop:
    pass


THREAD_SECONDS = 4.0


class MisbehavingLoop(AgentLoopBase):
    """One generation, then what its YAML entry's `how` says: `hang` (row index 1 awaits an event no
    one sets), `hang_thread` (row index 1 sleeps THREAD_SECONDS in asyncio.to_thread), `exit` (sys.exit(0)), `raise` (row index 1 raises), `nan` (a reward_score of nan), `empty` (returns no response), `beyond_vocab` (inserts id 10**6)."""

    async def run(self, sampling_params, **kwargs):
        import asyncio
        import sys
        import time

        prompt = list(kwargs["prompt_ids"])
        out = await self.server_manager.generate(prompt_ids=prompt, sampling_params=sampling_params)
        how = self.loop_kwargs.get("how")
        if how == "hang" and kwargs.get("index") == 1:
            await asyncio.Event().wait()
        if how == "hang_thread" and kwargs.get("index") == 1:  # stuck in a thread; it ends by itself
            await asyncio.to_thread(time.sleep, THREAD_SECONDS)
        if how == "exit":
            sys.exit(0)
        if how == "raise" and kwargs.get("index") == 1:  # a tool's service down, say
            raise RuntimeError("the sandbox is down")
        if how == "empty":
            return AgentLoopOutput(prompt, [], [], [], num_turns=2)
        if how == "beyond_vocab":  # an id a tokenizer never gives, inserted by the loop
            ids = out.token_ids + [10**6]
            return AgentLoopOutput(
                prompt, ids, [1] * len(out.token_ids) + [0], out.log_probs + [0.0], num_turns=2
            )
        ids, score = out.token_ids, float("nan") if how == "nan" else None
        return AgentLoopOutput(prompt, ids, [1] * len(ids), out.log_probs, num_turns=2, reward_score=score)


class SyncRunLoop(AgentLoopBase):
    """`run` written without async: found when the loop file is checked, not at the first step."""

    def run(self, sampling_params, **kwargs):
        return None


class OldConstructorLoop(AgentLoopBase):
    """verl_lite's constructor before it took verl's (context, server_manager): refused at start-up."""

    def __init__(self, context, server_manager):
        self.context, self.server_manager = context, server_manager

    async def run(self, sampling_params, **kwargs):
        return None


class CallToolOverride(ToolAgentLoop):
    """verl's way to change how a tool is called: override _call_tool (verl_lite's loop never calls it)."""

    async def _call_tool(self, tool_call, tools_kwargs, agent_data):
        raise AssertionError("never reached")


class OwnRunCallingVerlHooks(ToolAgentLoop):
    """Its own run drives verl's state machine, whose steps verl_lite's loop does not have."""

    async def run(self, sampling_params, **kwargs):
        return await self._handle_pending_state(None, sampling_params)


class FewerParallelCalls(ToolAgentLoop):
    """verl's attributes, set in __init__: run() reads them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_parallel_calls = 1
