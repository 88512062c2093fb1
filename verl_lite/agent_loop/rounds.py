"""Multi-turn trajectories across the rounds of verl 0.9's async trainer modes: a rank's agent loops
stay alive between rounds, and a generation cut off by a round resumes in the next, on the weights
that round brings (verl's partial rollout, for agent loops).

Under `trainer.v1.trainer_mode=colocate_async|separate_async` with agent loops, the driver
(trainer/colocate_async.py) places each new prompt group's trajectories on one rank and calls
`agent_round` on every rank once a round. Here (AgentRounds, one per rank) each trajectory is its
loop's task on an event loop that lives as long as the worker: a round runs that loop until every
live trajectory has generated its round's allowance (response_length / ROUNDS tokens, as a
single-turn trajectory's round) or finished, or -- after at least one engine call -- the rest are
away from the engine (in their tools) past the batcher's hold. Then the loop stops where it is:
loops parked on a generation, or inside a tool call (which keeps running in its thread and is
picked up next round), wait while the trainer trains and the weights change.

A generation the allowance cut off (RoundBatcher) keeps its tokens and their log-probs; the next
round asks the engine for the rest with the prompt plus those tokens and what is left of the
loop's budget, and the loop receives the whole generation once it ends (eos or its own budget):
its tokens may come from several model versions, as a single-turn partial response's do. Each
continuation is seeded by its own key (the request's key and the tokens it starts after), each
round is a rollout call of its own, so a config gives the same trajectories every run as long as
its tools answer within the hold (as in the sync rollout, scheduler.py).

The round's result: the trajectories that finished (their AgentLoopOutput and their per-trajectory
stats, runner.py), the ones whose loop raised (its error in one line: verl 0.9.1's failed session,
whose group the driver evicts and refills), and the ones that got tokens in it (the driver counts
their model versions). A batcher-level failure (a loop past its loop_timeout) fails the round.
A checkpoint keeps finished groups only; a resumed run starts its unfinished trajectories again
from their prompts, on fresh workers.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor

from verl_lite.agent_loop.checks import loop_timeout_s
from verl_lite.agent_loop.runner import waiting_in
from verl_lite.agent_loop.scheduler import ContinuousBatcher
from verl_lite.agent_loop.tool_loop import end_loop
from verl_lite.protocol import DataProto
from verl_lite.rollout.base import SamplingParams, TokenRequest, TokenResult


class RoundBatcher(ContinuousBatcher):
    """The continuous batcher (scheduler.py) with a per-round token allowance per trajectory: a
    request the allowance cuts off is paused with its tokens and continues at the next round."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.allowance: dict[int, int] = {}  # per live trajectory: tokens it may still generate this round
        self.paused: dict[int, asyncio.Future] = {}  # cut off by the allowance (or parked once it was spent)
        self.origin: dict[int, TokenRequest] = {}  # a paused or continued request as the loop asked it
        self.partial: dict[int, tuple[list[int], list[float]]] = {}  # its tokens so far
        self.progressed: set[int] = set()  # trajectories that got tokens this round
        self.round_end: float | None = None  # when the last round stopped the loop

    async def generate(self, trajectory: int, prompt_ids: list[int], sampling: dict):
        """A loop asks for one generation at a time (base.py); a second one at once is an error here:
        the round keeps one paused generation per trajectory."""
        if trajectory in self.paused or any(t == trajectory for t, _, _ in self.parked):
            raise RuntimeError(
                f"trajectory {trajectory} asked for a generation while its previous one is outstanding; "
                "under the async trainer modes an agent loop awaits each generate before the next"
            )
        return await super().generate(trajectory, prompt_ids, sampling)

    def start_round(self, chunk: int) -> None:
        """A new round: every live trajectory may generate `chunk` tokens; paused requests continue
        from their tokens (prompt + tokens, what is left of the budget, a key of their own)."""
        now = time.monotonic()
        gap = now - self.round_end if self.round_end is not None else 0.0
        for t in self.live:
            self.allowance[t] = chunk
            # the time between rounds (the trainer's) is no loop's: a loop's own time (its code, its
            # tools) adds up over rounds towards loop_timeout
            self.away_since[t] = min(now, self.away_since.get(t, now) + gap)
        for t, future in sorted(self.paused.items()):
            origin = self.origin[t]
            tokens = self.partial.get(t, ([], []))[0]
            rest = TokenRequest(
                origin.prompt_ids + tuple(tokens), origin.max_tokens - len(tokens), origin.params,
                origin.key + (len(tokens),),
            )  # fmt: skip
            self.parked.append((t, rest, future))
        self.paused = {}
        self.progressed = set()

    def _away(self) -> dict[int, float]:
        held = {t for t, _, _ in self.parked} | set(self.paused)
        return {t: self.away_since[t] for t in self.live - held}

    def _pause_spent(self) -> None:
        """Parked requests of trajectories that spent their allowance wait for the next round."""
        keep = []
        for t, request, future in self.parked:
            if self.allowance.get(t, 0) > 0:
                keep.append((t, request, future))
            else:
                self.origin.setdefault(t, request)
                self.paused[t] = future
        self.parked = keep

    async def drive_round(self) -> int:
        """Engine calls until the round is over (module docstring); the number of calls."""
        calls = 0
        while True:
            await asyncio.sleep(0)  # let woken loops and finished tool calls run first
            self._pause_spent()
            now = time.monotonic()
            away = self._away()
            self._check_timeout(away, now)
            hold = self.hold()
            if not self.parked and (not away or (calls and all(now - s >= hold for s in away.values()))):
                self.round_end = time.monotonic()
                return calls
            if self.parked and self._agree(now):
                await self._call()
                calls += 1
                continue
            # what can change the decision: a trajectory's hold running out (when requests wait for
            # it, or the round may end after its calls), a loop_timeout; else only a loop's next move
            deadlines = [s + hold for s in away.values() if s + hold > now] if self.parked or calls else []
            if self.loop_timeout is not None:
                deadlines += [s + self.loop_timeout for s in away.values()]
            self.changed.clear()
            timeout = max(0.0, min(deadlines) - now) if deadlines else None
            try:
                await asyncio.wait_for(self.changed.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    async def _call(self) -> None:
        batch = sorted(self.parked, key=lambda p: p[1].key)
        self.parked = []
        capped = [
            dataclasses.replace(r, max_tokens=min(r.max_tokens, self.allowance[t])) for t, r, _ in batch
        ]
        start = time.perf_counter()
        results, _ = self.engine(capped)
        seconds = self.last_call_s = time.perf_counter() - start
        self.num_engine_calls += 1
        now = time.monotonic()
        for (t, request, future), cap, result in zip(batch, capped, results, strict=True):
            self.generate_seconds[t] += seconds
            self.away_since[t] = now
            self.allowance[t] -= len(result.token_ids)
            if result.token_ids:
                self.progressed.add(t)
            tokens, log_probs = self.partial.pop(t, ([], []))
            tokens, log_probs = tokens + list(result.token_ids), log_probs + list(result.log_probs)
            if result.stop_reason == "length" and cap.max_tokens < request.max_tokens:
                self.origin.setdefault(t, request)  # cut by the round: the rest in the next
                self.partial[t] = (tokens, log_probs)
                self.paused[t] = future
            else:
                self.origin.pop(t, None)
                future.set_result(TokenResult(tokens, log_probs, result.stop_reason, result.num_preempted))


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())


class AgentRounds:
    """A rank's agent loops across rounds (module docstring), driven by `round`."""

    def __init__(self, runner, params: SamplingParams, chunk: int):
        """`runner`: the worker's AgentLoopRunner (its rollout, loops, context and stats);
        `params`: the training sampling settings; `chunk`: the tokens a trajectory may generate a round."""
        self.runner, self.params, self.chunk = runner, params, chunk
        self.loop = asyncio.new_event_loop()
        self.executor = ThreadPoolExecutor(thread_name_prefix="verl_lite-agent-loop")
        self.loop.set_default_executor(self.executor)
        # the trajectories still live when the worker exits are ended while its tool loop still
        # runs (tool_loop.py): left to the garbage collector, their `finally` blocks would run at
        # interpreter teardown, where no thread starts, and hold the process forever
        atexit.register(self.close)
        self.call: tuple[int, ...] = ()
        rollout = runner.rollout
        self.batcher = RoundBatcher(
            lambda requests: rollout.generate_requests(requests, self.call),
            params,
            runner.cfg.prompt_length + runner.cfg.response_length,
            loop_timeout=loop_timeout_s(runner.cfg),
            describe=lambda t: (
                f"trajectory {t} ({runner._loop_name(self.rows[t])}) waits in {waiting_in(self.tasks[t])}"
            ),
            hold_s=runner.hold_s,
        )
        self.tasks: dict[int, asyncio.Task] = {}
        self.rows: dict[int, dict] = {}

    def close(self, drain_s: float = 5.0) -> None:
        """Cancel the live trajectories, let their `finally` blocks run (at most `drain_s`), close the
        event loop. Safe to call more than once."""
        if self.loop.is_closed():
            return
        try:
            end_loop(self.loop, "agent-loop trajectories", drain_s)
        finally:
            self.executor.shutdown(wait=False, cancel_futures=True)
            self.tasks.clear()

    def _raised(self, t: int) -> bool:
        task = self.tasks[t]
        return task.cancelled() or task.exception() is not None

    def _error(self, t: int) -> str:
        """A failed trajectory's error in one line, naming its loop (verl evicts its group and refills
        it under the async modes; the driver counts it)."""
        task = self.tasks[t]
        error = "was cancelled" if task.cancelled() else f"raised {_one_line(task.exception())}"
        return f"{self.runner._loop_name(self.rows[t])} {error}"

    def round(self, prompts: DataProto | None, ids: list[int]) -> dict:
        """`prompts`: the new prompt groups placed on this rank (rollout_inputs' layout), `ids`: the
        driver's id of each of their trajectories (rollout.n per prompt, adjacent). One round of every
        live trajectory; what finished and what progressed."""
        rows = self.runner._trajectories(prompts, self.params.n) if prompts is not None else []
        if len(rows) != len(ids):
            raise ValueError(f"agent_round: {len(ids)} trajectory ids for {len(rows)} trajectories")
        sampling = self.runner.sampling(self.params)
        for t, row in zip(ids, rows, strict=True):
            self.rows[t] = row
            server = self.batcher.server(t)
            self.tasks[t] = self.loop.create_task(self.runner._one(self.batcher, server, row, dict(sampling)))
        self.call = self.runner.rollout.next_call(False)
        self.batcher.start_round(self.chunk)
        start = time.perf_counter()
        calls = self.loop.run_until_complete(self.batcher.drive_round())
        seconds = time.perf_counter() - start
        done = sorted(t for t, task in self.tasks.items() if task.done())
        failed = [(t, self._error(t)) for t in done if self._raised(t)]
        done = [t for t in done if not self._raised(t)]
        outputs = [self.tasks[t].result() for t in done]
        stats = self.runner._stats(outputs, [self.batcher.generate_seconds[t] for t in done])
        for t in [*done, *(t for t, _ in failed)]:  # the bookkeeping of a trajectory that ended
            self.rows.pop(t)
            self.tasks.pop(t)
            for kept in (self.batcher.allowance, self.batcher.away_since, self.batcher._requests):
                kept.pop(t, None)
            self.batcher.generate_seconds.pop(t, None)
        return {
            "finished": [(t, out, s) for t, out, s in zip(done, outputs, stats, strict=True)],
            "failed": failed,
            "progressed": sorted(self.batcher.progressed),
            "vocab_size": self.runner.vocab_size,
            "metrics": {"timing_s/generate_local": seconds, "agent_loop/engine_calls": calls},
        }
