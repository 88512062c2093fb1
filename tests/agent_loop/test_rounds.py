"""The async modes' multi-turn rounds (agent_loop/rounds.py): loops stay alive between rounds, a
generation cut off by a round's allowance continues in the next from its tokens and reaches its loop
whole, a trajectory in a slow tool does not hold a round's end, and a loop that raises is reported
as failed (its group is the driver's to evict) while the others finish.

The engine is scripted (as test_scheduler.py's): each request "generates" TARGET tokens in all,
token i of a generation being 100 + i, so a continuation's tokens show where it resumed; it reads
how many tokens a continuation starts after from its key (the rounds' own seeding rule)."""

import asyncio
import threading
import time

from tests.agent_loop.scripted import ScriptedRollout, prompt_batch, tool_tokenizer
from tests.helpers.agent import write_yaml
from tests.helpers.configs import tiny_rollout
from verl_lite.agent_loop.rounds import AgentRounds, RoundBatcher
from verl_lite.agent_loop.runner import AgentLoopRunner
from verl_lite.agent_loop.scheduler import LoopTimeout
from verl_lite.rollout.base import SamplingParams, TokenResult

TARGET = 10


def _engine(calls: list, seconds: float = 0.0):
    def engine(requests):
        time.sleep(seconds)
        calls.append([(r.key, len(r.prompt_ids), r.max_tokens) for r in requests])
        out = []
        for r in requests:
            before = r.key[2] if len(r.key) > 2 else 0
            give = min(r.max_tokens, TARGET - before)
            tokens = [100 + before + i for i in range(give)]
            stop = "eos" if before + give == TARGET else "length"
            out.append(TokenResult(tokens, [-0.01 * (before + i) for i in range(give)], stop))
        return out, True

    return engine


def _run_rounds(
    trajectories: int,
    turns: int,
    chunk: int,
    tool=None,
    hold_s=0.2,
    max_rounds=20,
    on_finish=None,
    on_round=None,
):
    """Loops of `turns` generations each (after each but the last, `tool(t, k)` in a thread); rounds
    until every loop returned. Returns (each loop's generations, the engine's calls, per round the
    trajectories that progressed)."""
    calls, generations, progressed = [], {t: [] for t in range(trajectories)}, []
    loop = asyncio.new_event_loop()
    batcher = RoundBatcher(_engine(calls), SamplingParams(n=1, response_length=64), 256, hold_s=hold_s)

    async def one(server, t):
        prompt = [5, 6]
        try:
            for k in range(turns):
                out = await server.generate(prompt_ids=prompt, sampling_params={"max_tokens": 40})
                generations[t].append((out.token_ids, out.log_probs, out.stop_reason))
                prompt = prompt + out.token_ids + [7]
                if k < turns - 1 and tool is not None:
                    await asyncio.to_thread(tool, t, k)
        finally:
            batcher.finished(t)
            if on_finish is not None:
                on_finish(t)

    tasks = [loop.create_task(one(batcher.server(t), t)) for t in range(trajectories)]
    try:
        for _ in range(max_rounds):
            if all(task.done() for task in tasks):
                break
            batcher.start_round(chunk)
            loop.run_until_complete(batcher.drive_round())
            progressed.append(sorted(batcher.progressed))
            if on_round is not None:
                on_round(progressed[-1])
        for task in tasks:
            task.result()  # a loop's error
        assert all(task.done() for task in tasks), "loops left after max_rounds"
    finally:
        loop.close()
    return generations, calls, progressed


def test_a_generation_cut_by_the_rounds_reaches_its_loop_whole():
    generations, calls, progressed = _run_rounds(trajectories=2, turns=2, chunk=4)
    whole = list(range(100, 100 + TARGET))
    for t in range(2):
        assert [g[0] for g in generations[t]] == [whole, whole]
        assert generations[t][0][1] == [-0.01 * i for i in range(TARGET)]  # log-probs in order
        assert [g[2] for g in generations[t]] == ["eos", "eos"]
    # per round, 4 tokens each: the first generation in rounds 1-3 (4 + 4 + 2), the second starts in
    # round 3 with what is left of its allowance (2), then 4 + 4
    assert calls[0] == [((0, 1), 2, 4), ((1, 1), 2, 4)]
    assert calls[1] == [((0, 1, 4), 6, 4), ((1, 1, 4), 6, 4)], "continued from prompt + its tokens"
    assert calls[2] == [((0, 1, 8), 10, 4), ((1, 1, 8), 10, 4)]
    assert calls[3] == [((0, 2), 13, 2), ((1, 2), 13, 2)], "the rest of round 3's allowance"
    assert calls[4][0] == ((0, 2, 2), 15, 4) and calls[5][0] == ((0, 2, 6), 19, 4)
    assert len(calls) == 6 and progressed == [[0, 1]] * 5


def test_a_trajectory_in_a_slow_tool_does_not_hold_the_round():
    """Trajectory 0's tool returns only once trajectory 1 has finished, which takes a second round:
    were a round to wait for every trajectory, the first would never end (the tool's safety timeout
    fails the test)."""
    other_done = threading.Event()
    ended_before_release = []

    def tool(t, k):
        if t == 0:
            assert other_done.wait(20), "the straggler was released by the safety timeout"

    def on_round(progressed):
        ended_before_release.append(not other_done.is_set())

    generations, _, progressed = _run_rounds(
        trajectories=2, turns=2, chunk=TARGET, tool=tool, on_finish=lambda t: t == 1 and other_done.set(),
        on_round=on_round,
    )  # fmt: skip
    assert [len(generations[t]) for t in range(2)] == [2, 2]
    assert progressed[0] == [0, 1] and ended_before_release[0], "round 1 ended with trajectory 0 in its tool"


def test_a_loop_that_raises_fails_its_trajectory_not_the_round(tmp_path):
    """Four trajectories of a user's loop on the scripted engine, 4 tokens a round: row 1's loop raises
    after its generation (cut over two rounds); the round reports it with its loop and error, the
    others finish with their whole generations."""
    tok = tool_tokenizer()
    cfg = tiny_rollout(prompt_length=24, response_length=40)
    cfg.agent.agent_loop_config_path = write_yaml(
        tmp_path / "loops.yaml",
        [{"name": "raise_loop", "_target_": "tests.agent_loop.user_loops.MisbehavingLoop", "how": "raise"}],
    )
    scripts = [["#### 7<|im_end|>"]] * 4
    runner = AgentLoopRunner(ScriptedRollout(tok, scripts), tok, cfg)
    rounds = AgentRounds(runner, SamplingParams(n=1, response_length=40), chunk=4)
    batch = prompt_batch(
        tok,
        [[{"role": "user", "content": "3+4="}]] * 4,
        24,
        agent_name=["raise_loop"] * 4,
        index=[0, 1, 2, 3],
    )
    first = rounds.round(batch, [0, 1, 2, 3])
    assert first["finished"] == [] and first["failed"] == [] and first["progressed"] == [0, 1, 2, 3]
    answers = [rounds.round(None, []) for _ in range(3)]
    finished = [f for a in answers for f in a["finished"]]
    failed = [f for a in answers for f in a["failed"]]
    assert sorted(t for t, _, _ in finished) == [0, 2, 3]
    assert failed == [
        (
            1,
            "agent loop 'raise_loop', tests.agent_loop.user_loops.MisbehavingLoop raised RuntimeError: "
            "the sandbox is down",
        )
    ]
    whole = tok("#### 7<|im_end|>", add_special_tokens=False)["input_ids"]
    assert all(out.response_ids == whole for _, out, _ in finished)
    rounds.close()


def test_closing_ends_the_live_trajectories_and_their_finally_blocks_run(tmp_path):
    """A worker that exits with trajectories in flight (the run ended, or was stopped) ends them while
    the interpreter is whole: left to the garbage collector at teardown, a tool agent's `finally`
    (releasing its tools on the worker's tool loop) would wait forever for a thread that cannot start
    then, and the worker process would never exit."""
    tok = tool_tokenizer()
    cfg = tiny_rollout(prompt_length=24, response_length=40)
    cfg.agent.agent_loop_config_path = write_yaml(
        tmp_path / "loops.yaml",
        [{"name": "raise_loop", "_target_": "tests.agent_loop.user_loops.MisbehavingLoop", "how": "raise"}],
    )
    runner = AgentLoopRunner(ScriptedRollout(tok, [["#### 7<|im_end|>"]] * 2), tok, cfg)
    rounds = AgentRounds(runner, SamplingParams(n=1, response_length=40), chunk=2)
    batch = prompt_batch(tok, [[{"role": "user", "content": "3+4="}]] * 2, 24, agent_name=["raise_loop"] * 2)
    rounds.round(batch, [0, 1])  # both cut off mid-generation: paused, their tasks pending
    tasks = list(rounds.tasks.values())
    assert len(tasks) == 2 and not any(task.done() for task in tasks)
    rounds.close()
    assert all(task.cancelled() for task in tasks) and rounds.loop.is_closed()
    rounds.close()  # again: nothing left to do


def test_loop_timeout_counts_a_loop_s_own_time_over_rounds_not_the_time_between_them():
    """A trajectory stuck in its own code, loop_timeout 0.5 s, beside one that generates 4 tokens a
    round on an engine taking 0.1 s a call, 0.3 s of "training" between rounds. Each round gives the
    stuck one ~0.1-0.3 s: the timeout fires after a few rounds -- not in round 2, as the wall clock
    (rounds and training) would have it, and not never, as a count restarted every round would."""
    loop = asyncio.new_event_loop()
    batcher = RoundBatcher(
        _engine([], seconds=0.1), SamplingParams(n=1, response_length=64), 256, hold_s=0.2, loop_timeout=0.5
    )
    stuck = threading.Event()

    async def busy(server):
        try:
            for _ in range(10):
                await server.generate(prompt_ids=[5, 6], sampling_params={"max_tokens": 40})
        finally:
            batcher.finished(server.trajectory)

    async def hung(server):
        try:
            await server.generate(prompt_ids=[5, 6], sampling_params={"max_tokens": 4})
            await asyncio.to_thread(stuck.wait, 30)  # its own code, not returning in time
        finally:
            batcher.finished(server.trajectory)

    tasks = [loop.create_task(busy(batcher.server(0))), loop.create_task(hung(batcher.server(1)))]
    failed_in = None
    try:
        for r in range(10):
            batcher.start_round(4)
            try:
                loop.run_until_complete(batcher.drive_round())
            except LoopTimeout as e:
                failed_in = (r, str(e))
                break
            time.sleep(0.3)  # the trainer's turn
    finally:
        stuck.set()
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.close()
    assert failed_in is not None, "the stuck trajectory was never timed out"
    assert failed_in[0] >= 2, f"timed out in round {failed_in[0] + 1}: the time between rounds was counted"
    assert "the first, 1;" in failed_in[1]  # trajectory 1 (the batcher names it by its describe)


def test_a_second_generation_at_once_is_refused():
    loop = asyncio.new_event_loop()
    batcher = RoundBatcher(_engine([]), SamplingParams(n=1, response_length=64), 256, hold_s=0.2)
    server = batcher.server(0)

    async def twice():
        first = asyncio.ensure_future(server.generate(prompt_ids=[5], sampling_params={}))
        await asyncio.sleep(0)
        try:
            await server.generate(prompt_ids=[5], sampling_params={})
        finally:
            first.cancel()

    try:
        loop.run_until_complete(twice())
    except RuntimeError as e:
        assert "trajectory 0 asked for a generation while its previous one is outstanding" in str(e)
    else:
        raise AssertionError("a second outstanding generation was accepted")
    finally:
        loop.close()
