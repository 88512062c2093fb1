"""The TurnBatcher (agent_loop/scheduler.py): one engine call per turn, its requests in trajectory
order whatever order the loops parked them in.

The order matters for reproducibility: the HF rollout draws one batch's samples from one seeded
generator (row i gets the i-th draws) and seeds the call from its first request, so a turn whose
requests arrive in the order tool threads happen to finish samples different tokens each run.
"""

import asyncio
import random

from verl_lite.agent_loop.scheduler import TurnBatcher
from verl_lite.rollout.base import SamplingParams, TokenResult


def _run(delays: dict[int, float], turns: int = 3) -> list[list[tuple[int, int]]]:
    """Loops of `turns` generations each; between two, trajectory t waits delays[t] seconds (a tool
    call running in a thread). Returns the request keys of each engine call."""
    calls: list[list[tuple[int, int]]] = []

    def engine(requests):
        if not requests:
            return [], False
        calls.append([r.key for r in requests])
        return [TokenResult([1], [-0.5], "eos") for _ in requests], True

    async def loop(batcher, server, t):
        try:
            for _ in range(turns):
                await server.generate(prompt_ids=[5, 6], sampling_params={})
                await asyncio.to_thread(lambda: __import__("time").sleep(delays[t]))
        finally:
            batcher.finished(t)

    async def main():
        batcher = TurnBatcher(engine, SamplingParams(n=1, response_length=4), context_length=16)
        servers = [batcher.server(t) for t in sorted(delays)]
        tasks = [asyncio.create_task(loop(batcher, s, s.trajectory)) for s in servers]
        await batcher.drive()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    return calls


def test_each_turn_reaches_the_engine_in_trajectory_order():
    n = 8
    # the last trajectory's "tool" finishes first: parked in reverse order
    calls = _run({t: 0.002 * (n - t) for t in range(n)})
    assert len(calls) == 3
    for k, keys in enumerate(calls, start=1):
        assert keys == [(t, k) for t in range(n)], keys


def test_random_tool_finishing_orders_give_the_same_calls():
    rng = random.Random(0)
    reference = _run({t: 0.0 for t in range(6)})
    for _ in range(3):
        assert _run({t: rng.uniform(0, 0.01) for t in range(6)}) == reference
