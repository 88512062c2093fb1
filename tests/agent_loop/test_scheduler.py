"""The ContinuousBatcher (agent_loop/scheduler.py): an engine call takes whatever is waiting, a slow
tool in one trajectory does not hold the others' generations, and tool calls that finish within the
hold still meet in one call per turn, ordered by request key whatever order the loops parked in.

The properties are asserted on the engine's calls (which requests, in which order), never on
wall-clock thresholds: a straggler's "tool" blocks until the other trajectories have finished, which
under a per-turn barrier would never happen (it is bounded by a safety timeout, counted as a failure).
Two real gloo ranks sharing one "engine" (the vLLM TP group's collectives, tp_group.py) check that
the ranks stay in lock-step and one rank's straggler holds neither rank's other trajectories.
"""

import asyncio
import math
import random
import threading
import time

import pytest

from tests.helpers.dist import run_ranks
from verl_lite.agent_loop.runner import run_bounded
from verl_lite.agent_loop.scheduler import HOLD_FLOOR_S, ContinuousBatcher, LoopTimeout
from verl_lite.rollout.base import SamplingParams, TokenResult

SAFETY_S = 20.0  # a straggler released by this, not by the others finishing, fails the test


def _run(delays, turns=3, hold_s=None, exchange=None, engine_hook=None, trajectories=None, loop_timeout=None):
    """Loops of `turns` generations each; after its k-th, trajectory t runs a "tool" in a thread:
    delays(t, k) seconds, or a threading.Event to wait for. Returns the request keys of each engine
    call (empty ones, a TP rank passing nothing, included)."""
    calls: list[list[tuple[int, int]]] = []
    trajectories = list(trajectories if trajectories is not None else range(8))

    def engine(requests):
        keys = [r.key for r in requests]
        if engine_hook is not None:
            active = engine_hook(keys)
        else:
            active = bool(requests)
        if active:
            calls.append(keys)
        return [TokenResult([1], [-0.5], "eos") for _ in requests], active

    def tool(t, k):
        wait = delays(t, k)
        if isinstance(wait, threading.Event):
            assert wait.wait(SAFETY_S), f"trajectory {t}'s tool was released by the safety timeout"
        else:
            time.sleep(wait)

    async def loop(batcher, server, t):
        try:
            for k in range(turns):
                await server.generate(prompt_ids=[5, 6], sampling_params={})
                if k < turns - 1:
                    await asyncio.to_thread(tool, t, k)
        finally:
            batcher.finished(t)

    async def main():
        batcher = ContinuousBatcher(
            engine,
            SamplingParams(n=1, response_length=4),
            context_length=16,
            hold_s=hold_s,
            exchange=exchange,
            loop_timeout=loop_timeout,
        )
        servers = [batcher.server(t) for t in trajectories]
        tasks = [asyncio.create_task(loop(batcher, s, s.trajectory)) for s in servers]
        try:
            await batcher.drive()
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()

    run_bounded(main())  # not waiting for a tool thread left running (the loop_timeout case)
    return calls


def test_fast_tools_meet_in_one_call_per_turn_in_trajectory_order():
    n = 8
    # the last trajectory's "tool" finishes first: parked in reverse order, all within the hold (an
    # explicit 1 s: the default's 0.1 s floor is the same rule, with less margin on a loaded machine)
    calls = _run(lambda t, k: 0.002 * (n - t), hold_s=1.0)
    assert calls == [[(t, k) for t in range(n)] for k in (1, 2, 3)], calls


def test_random_tool_finishing_orders_give_the_barriers_calls():
    rng = random.Random(0)
    barrier = _run(lambda t, k: 0.0, hold_s=math.inf)
    for _ in range(3):
        assert _run(lambda t, k: rng.uniform(0, 0.01), hold_s=1.0) == barrier


def test_a_straggler_does_not_hold_the_others_generations():
    """Trajectory 0's first tool returns only once every other trajectory has finished: under a
    barrier they would wait for it (each in its second turn, forever). A 0.5 s hold (the default's
    rule, more margin for the fast tools on a loaded machine)."""
    others_done = threading.Event()
    seen: set[tuple[int, int]] = set()

    def hook(keys):
        seen.update(keys)
        if all((t, 3) in seen for t in range(1, 8)):
            others_done.set()
        return bool(keys)

    calls = _run(lambda t, k: others_done if (t, k) == (0, 0) else 0.0, engine_hook=hook, hold_s=0.5)
    assert calls[0] == [(t, 1) for t in range(8)]  # everyone's first request: one call
    late = next(i for i, keys in enumerate(calls) if (0, 2) in keys)
    before = [key for keys in calls[:late] for key in keys]
    assert all((t, k) in before for t in range(1, 8) for k in (1, 2, 3)), calls
    # the others still batched together: one call per turn of theirs
    assert calls[1:3] == [[(t, k) for t in range(1, 8)] for k in (2, 3)], calls
    assert calls[late:] == [[(0, 2)], [(0, 3)]]


def test_the_barrier_waits_for_the_straggler():
    calls = _run(lambda t, k: 0.3 if (t, k) == (0, 0) else 0.0, hold_s=math.inf)
    assert calls == [[(t, k) for t in range(8)] for k in (1, 2, 3)]


def test_the_default_hold_is_the_floor_or_the_last_calls_seconds():
    def batcher(**kwargs):
        return ContinuousBatcher(lambda requests: ([], False), SamplingParams(), 16, **kwargs)

    default = batcher()
    assert default.hold() == HOLD_FLOOR_S == 0.1
    default.last_call_s = 2.5  # a generation call that long: a tool returning sooner is waited for
    assert default.hold() == 2.5
    assert batcher(hold_s=math.inf).hold() == math.inf


def test_a_loop_away_past_loop_timeout_fails_the_rollout_even_beside_others():
    forever = threading.Event()
    try:
        with pytest.raises(
            LoopTimeout, match=r"1 trajectories' agent loops neither generated nor finished within 0.3 s"
        ):
            _run(lambda t, k: forever if t == 3 else 0.0, loop_timeout=0.3)
    finally:
        forever.set()  # the tool's thread ends


TURNS = (3, 5)  # per rank: rank 1's trajectories go on after rank 0's fast ones have finished


def _rank(rank, world, straggler: bool):
    """Rank 0 and 1 share one "engine": every call is an all_gather of the requests (as vLLM's TP
    group), and the batchers exchange their status before each (tp_group.gather_objects). Rank 0's
    trajectory 0 may be the straggler: once rank 0's other trajectories are done it has nothing
    parked, and rank 1's last two turns need it to agree, passing no requests."""
    from verl_lite.rollout.tp_group import TPGroup

    group = TPGroup(2)
    others_done = threading.Event()
    seen: set[tuple[int, int, int]] = set()

    def hook(keys):
        everyone, _ = group.gather_objects([(rank, *k) for k in keys])
        flat = [key for member in everyone for key in member]
        seen.update(flat)
        if all((r, t, TURNS[r]) in seen for r in (0, 1) for t in range(4) if (r, t) != (0, 0)):
            others_done.set()
        return bool(flat)

    def delays(t, k):
        if straggler and rank == 0 and (t, k) == (0, 0):
            return others_done
        return 0.001 * ((t * 7 + k * 3 + rank) % 5)

    calls = _run(
        delays,
        turns=TURNS[rank],
        engine_hook=hook,
        exchange=lambda status: group.gather_objects(status)[0],
        trajectories=range(4),
        hold_s=0.5,  # the fast tools' margin on a loaded machine
    )
    return calls, sorted(seen)


@pytest.mark.parametrize("straggler", [False, True])
def test_tp_ranks_call_together_and_a_straggler_holds_neither(straggler):
    (calls0, seen0), (calls1, seen1) = run_ranks(_rank, 2, straggler)
    assert len(calls0) == len(calls1) and seen0 == seen1  # lock-step: the same calls on both ranks
    mine = [[(t, k) for t in range(4)] for k in range(1, 6)]  # rank 1's: one call per turn
    if not straggler:  # fast tools: one call per turn, both ranks' requests in it
        assert calls0 == mine[:3] + [[], []] and calls1 == mine, (calls0, calls1)
    else:  # rank 0's trajectory 0 returned from its tool only after every other trajectory finished
        assert calls1[:5] == mine and calls0[3:5] == [[], []], (calls0, calls1)
        assert calls0[-2:] == [[(0, 2)], [(0, 3)]] and calls1[-2:] == [[], []], (calls0, calls1)
