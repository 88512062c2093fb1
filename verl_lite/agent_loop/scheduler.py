"""Batched turns: every trajectory's loop runs as its own asyncio task, and their generations meet in
one engine call per turn.

A loop's `generate` (through its TrajectoryServer) parks the request and waits. When every live
trajectory is parked (the others have finished; those running tools are waited for, at most the
tool timeout), the TurnBatcher hands all parked requests to the engine at once
(`Rollout.generate_requests`: token ids in, sampled ids and log-probs out), wakes each loop with
its result, and waits for the next turn. So turn k of every trajectory is one batch, however many
turns each takes, and no loop's code needs to know about batching. The ranks that share a vLLM
engine (a TP group) call the engine together each turn, a rank with nothing left passing no
requests, until none of them has any. A turn's requests go to the engine ordered by their key
(trajectory, request number), never by the order the loops happened to park them in, so a seed
gives the same batches, hence the same samples, every run.

The sampling settings of a request are the call's (training or validation) unless a loop overrides
temperature, top_k or top_p in its `sampling_params`; `max_tokens` (or sglang's `max_new_tokens`,
as verl accepts it) is its token budget; by default, as verl 0.9's server: response_length, or what
is left of prompt_length + response_length after the prompt it sends when that is less.
`logprobs` (verl's calculate_log_probs) is accepted and changes nothing: log-probs always come back.

A loop that neither asks for a generation nor finishes within `loop_timeout` seconds of the last
turn (rollout.agent.loop_timeout: its own code, its tools' and interaction's calls) would hold every
other trajectory at the barrier forever: the turn fails instead, naming each such trajectory's loop
and the call it waits in (`describe`). A loop that blocks the event loop itself (a synchronous
sleep) cannot be interrupted from here; tool and interaction calls run off this loop for that reason
(on the tool loop, or in threads: tool_calls.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
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


class TurnBatcher:
    def __init__(
        self,
        engine: Engine,
        params: SamplingParams,
        context_length: int,
        loop_timeout: float | None = None,
        describe: Callable[[int], str] = str,
    ):
        self.engine, self.params, self.context_length = engine, params, context_length
        self.loop_timeout, self.describe = loop_timeout, describe
        self.parked: list[tuple[int, TokenRequest, asyncio.Future]] = []
        self.live: set[int] = set()
        self.ready = asyncio.Event()
        self.num_engine_calls = 0
        self.generate_seconds: dict[int, float] = {}  # per trajectory: engine time of its turns
        self._requests: dict[int, int] = {}

    def server(self, trajectory: int) -> TrajectoryServer:
        self.live.add(trajectory)
        self._requests[trajectory] = 0
        self.generate_seconds[trajectory] = 0.0
        return TrajectoryServer(self, trajectory)

    def finished(self, trajectory: int) -> None:
        self.live.discard(trajectory)
        self._check()

    def _check(self) -> None:
        if self.live <= {t for t, _, _ in self.parked}:
            self.ready.set()

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
        self._check()
        result: TokenResult = await future
        return TokenOutput(result.token_ids, result.log_probs, result.stop_reason, result.num_preempted)

    async def drive(self) -> None:
        """Engine calls, one per turn, until no rank of the engine's group has a request left."""
        while True:
            if self.live:
                await self._wait_for_loops()
            self.ready.clear()
            # in request-key order, not parking order: loops wake from tool threads in whatever
            # order those finish, and the engine's sampling (HF: one generator for the batch, seeded
            # by its first request) must see the same batch every run
            batch, self.parked = sorted(self.parked, key=lambda p: p[1].key), []
            start = time.perf_counter()
            results, active = self.engine([request for _, request, _ in batch])
            if not active:
                return
            self.num_engine_calls += 1
            seconds = time.perf_counter() - start
            for (trajectory, _, future), result in zip(batch, results):
                self.generate_seconds[trajectory] += seconds
                future.set_result(result)
            await asyncio.sleep(0)  # let the woken loops run before checking again

    async def _wait_for_loops(self) -> None:
        try:
            await asyncio.wait_for(self.ready.wait(), self.loop_timeout)
        except asyncio.TimeoutError:
            stuck = sorted(self.live - {t for t, _, _ in self.parked})
            raise LoopTimeout(
                f"{len(stuck)} trajectories' agent loops neither generated nor finished within "
                f"{self.loop_timeout:g} s (actor_rollout_ref.rollout.agent.loop_timeout): the first, "
                f"{self.describe(stuck[0])}; fix the code it waits in, or raise the key"
            ) from None


class TrajectoryServer:
    """What a loop sees as its server (verl's AsyncLLMServerManager): generate for one trajectory."""

    def __init__(self, batcher: TurnBatcher, trajectory: int):
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
        `priority` too (verl's scheduling hint: a turn's requests all go in one engine call here)."""
        if image_data or video_data or audio_data or mm_processor_output:
            raise ValueError("image_data / video_data / audio_data: verl_lite's rollouts are text only")
        return await self.batcher.generate(self.trajectory, list(prompt_ids), dict(sampling_params or {}))
