"""Continuous batching of the trajectories' generations: every trajectory's loop runs as its own
asyncio task, and an engine call takes whatever requests are waiting, so no trajectory waits for
another's tools.

A loop's `generate` (through its TrajectoryServer) parks the request and waits. The engine is called
with every parked request as soon as each live trajectory is either parked or a straggler: away from
the engine (in a tool or interaction call, or its own code) for at least the hold, by default
max(HOLD_FLOOR_S, the last engine call's seconds). Tool calls that finish within the hold join the
batch (an ordinary run's batches are the old turn-synchronous ones, so its samples do not depend on
timing); a trajectory whose tool takes longer is left behind, the others go on, and its request
joins whatever call is next once its tool returns. A straggler costs the others at most the hold
per call, not its tool's time (scripts/bench_async.py --case straggler). `hold_s=math.inf` is the
per-turn barrier (every live trajectory parked), kept as the measured baseline.

The engine's calls are blocking (the HF backend's generate, vLLM's LLM.generate): a request that
parks during a call waits for the next one; the engine never sits idle while a request is ready.
Sampling is seeded per request, by (rollout.seed, rank, the rollout call, the request key
(trajectory, request number)), never by a request's batch or its place in it, so the same request
draws the same tokens whatever shares its call (up to the float rounding that batch padding changes,
docs/multi_turn.md). A call's requests still go to the engine ordered by their key.

The ranks that share a vLLM engine (a TP group, `exchange`) must call it together: each round they
exchange (agrees: no trajectory of its own to wait for, has requests ready, anything left), a rank
not ready re-entering every GROUP_POLL_S, and call the engine when some rank has requests and every
rank with anything left agrees (one whose only trajectories are stragglers agrees, and passes no
requests), until none has anything left.

The sampling settings of a request are the call's (training or validation) unless a loop overrides
temperature, top_k or top_p in its `sampling_params`; `max_tokens` (or sglang's `max_new_tokens`,
as verl accepts it) is its token budget; by default, as verl 0.9's server: response_length, or what
is left of prompt_length + response_length after the prompt it sends when that is less.
`logprobs` (verl's calculate_log_probs) is accepted and changes nothing: log-probs always come back.

A loop that neither asks for a generation nor finishes within `loop_timeout` seconds of its last
result (rollout.agent.loop_timeout: its own code, its tools' and interaction's calls) fails the
rollout, naming each such trajectory's loop and the call it waits in (`describe`). A loop that
blocks the event loop itself (a synchronous sleep) cannot be interrupted from here; tool and
interaction calls run off this loop for that reason (on the tool loop, or in threads: tool_calls.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

from verl_lite.agent_loop.base import TokenOutput
from verl_lite.rollout.base import SamplingParams, TokenRequest, TokenResult

SAMPLING_KEYS = (
    "temperature",
    "top_k",
    "top_p",
    "max_tokens",
    "max_new_tokens",
    "repetition_penalty",
    "logprobs",
)

Engine = Callable[[list[TokenRequest]], tuple[list[TokenResult], bool]]


def request_params(base: SamplingParams, sampling: dict[str, Any]) -> SamplingParams:
    """The call's settings with the loop's overrides; an unknown key or a repetition penalty is an error."""
    unknown = sorted(set(sampling) - set(SAMPLING_KEYS))
    if unknown:
        raise ValueError(f"sampling_params {unknown} are not supported; a loop may set {list(SAMPLING_KEYS)}")
    if sampling.get("repetition_penalty", 1.0) != 1.0:
        raise ValueError("sampling_params.repetition_penalty must be 1.0 (the rollout samples without one)")
    changes = {k: sampling[k] for k in ("temperature", "top_k", "top_p") if sampling.get(k) is not None}
    if changes.get("temperature") == 0:
        changes["do_sample"] = False
    return dataclasses.replace(base, **changes)


class LoopTimeout(RuntimeError):
    """A trajectory's loop went `loop_timeout` seconds without a generation request or finishing."""


HOLD_FLOOR_S = 0.1  # the shortest a batch waits for a trajectory away from the engine
GROUP_POLL_S = 0.02  # how often a rank of a TP group that is not ready meets the others


class ContinuousBatcher:
    """`engine(requests) -> (results, active)` (Rollout.generate_requests for one rollout call);
    `exchange(status) -> [every rank's status]`: the collective of the ranks sharing the engine, None
    for an engine of its own; `hold_s`: a fixed hold (None: max(HOLD_FLOOR_S, the last call's
    seconds); math.inf: the per-turn barrier)."""

    def __init__(
        self,
        engine: Engine,
        params: SamplingParams,
        context_length: int,
        loop_timeout: float | None = None,
        describe: Callable[[int], str] = str,
        hold_s: float | None = None,
        exchange: Callable[[Any], list] | None = None,
    ):
        self.engine, self.params, self.context_length = engine, params, context_length
        self.loop_timeout, self.describe = loop_timeout, describe
        self.hold_s, self.exchange = hold_s, exchange
        self.parked: list[tuple[int, TokenRequest, asyncio.Future]] = []
        self.live: set[int] = set()
        self.away_since: dict[int, float] = {}  # per live trajectory: when it last left the engine
        self.changed = asyncio.Event()
        self.last_call_s = 0.0
        self.num_engine_calls = 0
        self.generate_seconds: dict[int, float] = {}  # per trajectory: engine time of its calls
        self._requests: dict[int, int] = {}

    def server(self, trajectory: int) -> TrajectoryServer:
        self.live.add(trajectory)
        self.away_since[trajectory] = time.monotonic()
        self._requests[trajectory] = 0
        self.generate_seconds[trajectory] = 0.0
        return TrajectoryServer(self, trajectory)

    def finished(self, trajectory: int) -> None:
        self.live.discard(trajectory)
        self.changed.set()

    async def generate(self, trajectory: int, prompt_ids: list[int], sampling: dict[str, Any]) -> TokenOutput:
        params = request_params(self.params, sampling)
        budget = sampling.get("max_tokens", sampling.get("max_new_tokens"))
        if budget is None:
            budget = min(self.params.response_length, self.context_length - len(prompt_ids))
        budget = int(budget)
        if budget <= 0:
            return TokenOutput([], [], "length")
        count = self._requests[trajectory] = self._requests[trajectory] + 1
        request = TokenRequest(tuple(prompt_ids), budget, params, (trajectory, count))
        future = asyncio.get_running_loop().create_future()
        self.parked.append((trajectory, request, future))
        self.changed.set()
        result: TokenResult = await future
        return TokenOutput(result.token_ids, result.log_probs, result.stop_reason, result.num_preempted)

    def hold(self) -> float:
        return self.hold_s if self.hold_s is not None else max(HOLD_FLOOR_S, self.last_call_s)

    async def drive(self) -> None:
        """Engine calls until no rank of the engine's group has a trajectory left."""
        while True:
            await asyncio.sleep(0)  # let woken loops and finished tool calls run first
            await self._wait()
            agree = self._agree(time.monotonic())  # no trajectory of this rank to wait for
            ready, left = agree and bool(self.parked), bool(self.live or self.parked)
            if self.exchange is not None:
                # every rank calls the engine together: when each with anything left agrees and
                # one has requests (a rank with none passes [])
                statuses = self.exchange((agree, ready, left))
                if not any(other_left for _, _, other_left in statuses):
                    return
                if not any(other_ready for _, other_ready, _ in statuses) or not all(
                    other_agree or not other_left for other_agree, _, other_left in statuses
                ):
                    continue  # meet again
            elif not left:
                return
            elif not ready:
                continue
            # in request-key order, not parking order: loops wake from tool threads in whatever order
            # those finish; the samples do not depend on it (per-request seeds), the call's layout would
            batch = sorted(self.parked, key=lambda p: p[1].key) if ready else []
            self.parked = [] if ready else self.parked
            start = time.perf_counter()
            results, active = self.engine([request for _, request, _ in batch])
            seconds = time.perf_counter() - start
            if not active:
                return
            self.num_engine_calls += 1
            if batch:
                self.last_call_s = seconds
            now = time.monotonic()
            for (trajectory, _, future), result in zip(batch, results):
                self.generate_seconds[trajectory] += seconds
                self.away_since[trajectory] = now
                future.set_result(result)

    def _away(self) -> dict[int, float]:
        """The live trajectories with no request parked, and since when each is away."""
        parked = {t for t, _, _ in self.parked}
        return {t: self.away_since[t] for t in self.live - parked}

    def _agree(self, now: float) -> bool:
        """Every trajectory away from the engine has been away for the hold: none to wait for."""
        hold = self.hold()
        return all(now - since >= hold for since in self._away().values())

    async def _wait(self) -> None:
        """Until the parked requests should go or nothing is left; in a group, at most GROUP_POLL_S
        (a rank with nothing parked still tells the others whether it agrees)."""
        poll_end = time.monotonic() + GROUP_POLL_S if self.exchange is not None else math.inf
        while True:
            now = time.monotonic()
            away = self._away()
            self._check_timeout(away, now)
            if not self.live and not self.parked:
                return
            if (self.parked and self._agree(now)) or now >= poll_end:
                return
            deadlines = [poll_end]
            if self.parked or self.exchange is not None:
                deadlines += [since + self.hold() for since in away.values()]
            if self.loop_timeout is not None:
                deadlines += [since + self.loop_timeout for since in away.values()]
            deadline = min(deadlines)
            self.changed.clear()
            timeout = None if math.isinf(deadline) else max(0.0, deadline - now)
            try:
                await asyncio.wait_for(self.changed.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    def _check_timeout(self, away: dict[int, float], now: float) -> None:
        if self.loop_timeout is None:
            return
        stuck = sorted(t for t, since in away.items() if now - since >= self.loop_timeout)
        if stuck:
            raise LoopTimeout(
                f"{len(stuck)} trajectories' agent loops neither generated nor finished within "
                f"{self.loop_timeout:g} s (actor_rollout_ref.rollout.agent.loop_timeout): the first, "
                f"{self.describe(stuck[0])}; fix the code it waits in, or raise the key"
            )


class TrajectoryServer:
    """What a loop sees as its server (verl's AsyncLLMServerManager): generate for one trajectory."""

    def __init__(self, batcher: ContinuousBatcher, trajectory: int):
        self.batcher, self.trajectory = batcher, trajectory

    async def generate(
        self,
        request_id: str | None = None,
        *,
        prompt_ids: list[int],
        sampling_params: dict | None = None,
        image_data=None,
        video_data=None,
        audio_data=None,
        mm_processor_kwargs: dict | None = None,
        mm_processor_output=None,
        priority: int = 0,
    ) -> TokenOutput:
        """verl's LLMServerClient.generate. `request_id` is accepted (one trajectory, one server here),
        `priority` too (verl's scheduling hint: an engine call takes every waiting request here)."""
        if image_data or video_data or audio_data or mm_processor_output:
            raise ValueError("image_data / video_data / audio_data: verl_lite's rollouts are text only")
        return await self.batcher.generate(self.trajectory, list(prompt_ids), dict(sampling_params or {}))
