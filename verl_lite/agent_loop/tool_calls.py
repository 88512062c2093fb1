"""Calling tools for the agent loop: concurrently, each call bounded by a timeout, every failure a
message to the model.

`ToolRunner` (one per worker) runs every async tool method as a task of the worker's one tool loop
(tool_loop.py: so asyncio objects a tool keeps across calls, a semaphore or a lock, work as in
verl), and every plain (`def`) method in a thread of its own (at most POOL_SIZE at once, over all
trajectories: a blocking tool stalls no other call). It waits for a call at most
`multi_turn.tool_call_timeout` seconds from when it starts (not while it queues for a thread). So a
tool that hangs costs its trajectory that many seconds and no more: the other trajectories' calls
go on, and no other trajectory waits for it (agent_loop/scheduler.py). A call stuck awaiting
is cancelled at its timeout; a thread blocked in a call cannot be stopped from Python and keeps its
(daemon) thread and slot until it returns. An async method that blocks (time.sleep inside
`async def`) holds the tool loop, as in verl: each call still times out, but the worker's other
async calls wait for it.

`ToolSession` (one per trajectory) holds the trajectory's tool instances: a tool's instance is
created at its first call (with the row's `tools_kwargs.<tool>.create_kwargs`), serves the
trajectory's later calls (so a tool's state spans the episode, as verl's contract describes it),
and is scored (`calc_reward`) and released when the trajectory ends. A turn's calls run
concurrently, at most `max_parallel_calls` of them; the turn's further calls are not run (verl) and
are counted. Every call run leaves its step reward in `tool_rewards`, in the order the model made
the calls (verl 0.9's ToolAgentLoop): the reward `execute` returned, 0.0 for a call that failed
(verl's `_call_tool` returns 0.0 on an error), nothing when `execute` returned None as its reward;
`finish` returns each tool's `calc_reward` (reward/extra_info.py: where both reach the reward function).
What the model is told for a call, in verl 0.9.0's words (ToolAgentLoop._call_tool):
  - the tool's text, truncated to max_tool_response_length characters on tool_response_truncate_side;
  - `Unknown function 'x'. Available tools: [...]` for a name no tool has (checked first, as verl does);
  - `Invalid JSON in arguments for 'x': ...` for arguments that are not a JSON object;
  - `Error executing tool 'x': ...` for a tool whose create or execute raises or times out, or whose
    result has images or video (text models only), or another malformed call (tool_parser.py: verl
    drops those; the cause follows the colon).
Every call's outcome is counted (ToolStats) for the step's metrics, and per tool the calls, the
failures and the first failure's text: when every call of a tool in a step fails, the driver says
so once on the console with that cause (metrics.py), not only in a counter.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from verl_lite.agent_loop.tool_loop import ToolLoop
from verl_lite.agent_loop.tool_parser import ToolCall
from verl_lite.utils.scores import as_float
from verl_lite.utils.user_code import PROCESS_EXITS, UserCodeExit, describe_exit

POOL_SIZE = 64  # tool calls running at once per worker, over all its trajectories


class ToolTimeout(Exception):
    pass


class CreateFailed(Exception):
    """A call of a tool whose instance could not be created: the message is create's cause."""

    def __str__(self) -> str:
        return str(self.args[0])


def _as_exception(e: BaseException) -> Exception:
    """A tool's exit is an error of that call, not of the loop awaiting it."""
    if isinstance(e, PROCESS_EXITS):
        return UserCodeExit(f"the call {describe_exit(e)}")
    return e if isinstance(e, Exception) else RuntimeError(f"the tool call ended with {type(e).__name__}")


async def _guarded(fn, args, kwargs):
    """`await fn(*args, **kwargs)` with an exit turned into the call's error: a task that raises
    SystemExit would otherwise stop the tool loop itself (asyncio re-raises it out of run_forever).
    Binding the arguments happens here too, so a TypeError is the call's error, told at once."""
    try:
        return await fn(*args, **kwargs)
    except PROCESS_EXITS as e:
        raise _as_exception(e) from None


async def _awaited(awaitable):
    return await _guarded(lambda: awaitable, (), {})


@dataclass
class ToolStats:
    calls: int = 0  # calls run (well-formed, within max_parallel_calls)
    errors: int = 0  # calls that failed: unknown tool, raised, malformed, unusable result
    timeouts: int = 0
    malformed: int = 0
    dropped: int = 0  # beyond max_parallel_calls in a turn: not run
    latencies: list[float] = field(default_factory=list)  # seconds per call run
    seconds: float = 0.0  # wall time of the trajectory's tool turns (verl's agent_loop/tool_calls)
    per_tool: dict[str, list] = field(default_factory=dict)  # name -> [calls, failures, first failure]

    def outcome(self, name: str, failure: str | None) -> None:
        entry = self.per_tool.setdefault(name, [0, 0, None])
        entry[0] += 1
        if failure is not None:
            entry[1] += 1
            entry[2] = entry[2] or failure

    def as_dict(self) -> dict[str, Any]:
        return {
            "num_tool_calls": self.calls,  # not verl's metrics["tool_calls"], which is seconds
            "tool_errors": self.errors,
            "tool_timeouts": self.timeouts,
            "tool_malformed": self.malformed,
            "tool_dropped": self.dropped,
            "tool_latencies": list(self.latencies),
            "tool_seconds": self.seconds,
            "tool_outcomes": {name: list(entry) for name, entry in self.per_tool.items()},
        }


def truncate(text: str, limit: int, side: str) -> str:
    """verl 0.9.1's truncation of a tool's text to `limit` characters (ToolAgentLoop._call_tool): the
    side named is the side cut, so `left` keeps the end, `right` the start, `middle` both halves."""
    if len(text) <= limit:
        return text
    if side == "left":
        return "(truncated)..." + text[-limit:]
    if side == "right":
        return text[:limit] + "...(truncated)"
    half = limit // 2
    return text[:half] + "...(truncated)..." + text[-half:]


def as_reward(value):
    """A tool's reward for the reward function: a number as a plain float, anything else (None, a
    list, a dict) as the tool returned it, as verl passes it on."""
    number = as_float(value)
    return value if number is None or isinstance(value, bool) else number


def takes_keyword(fn, name: str) -> bool:
    """`fn` accepts the keyword `name` (by that name or by **kwargs)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind is p.VAR_KEYWORD or (p.name == name and p.kind is not p.POSITIONAL_ONLY) for p in params
    )


class ToolRunner:
    def __init__(
        self,
        tools: dict,
        timeout_s: float,
        max_response_length: int,
        truncate_side: str,
        pool_size: int = POOL_SIZE,
    ):
        self.tools, self.timeout_s = tools, timeout_s
        self.max_response_length, self.truncate_side = max_response_length, truncate_side
        self._slots = threading.BoundedSemaphore(pool_size)
        self.loop = ToolLoop()
        weakref.finalize(self, self.loop.close)  # its thread ends with the runner

    async def call(self, fn, *args, **kwargs):
        """`fn(*args, **kwargs)` for at most timeout_s, its result or its exception here: an async
        `fn` as a task of the worker's tool loop (tool_loop.py), a plain one in a thread of its own
        (at most pool_size at once; a blocking tool then stalls no other call). The deadline starts
        when the call starts, not while it waits for a thread. On a timeout an async call is
        cancelled; a thread blocked in a call cannot be stopped from Python and keeps its (daemon)
        thread and slot until it returns; the rollout's loop_timeout bounds the queue."""
        if inspect.iscoroutinefunction(fn):
            future = self.loop.submit(_guarded(fn, args, kwargs))
            try:  # wait_for cancels the wrapped future at the deadline, and so the task on the tool loop
                return await asyncio.wait_for(asyncio.wrap_future(future), self.timeout_s)
            except asyncio.TimeoutError:
                # the async modes pause this loop between rounds (rounds.py): a call that finished
                # in time may find its deadline passed when the loop runs again; its answer stands
                if future.done() and not future.cancelled() and future.exception() is None:
                    return future.result()
                raise ToolTimeout() from None
        return await self._in_thread(fn, args, kwargs)

    async def _in_thread(self, fn, args, kwargs):
        loop = asyncio.get_running_loop()
        running: asyncio.Future = loop.create_future()  # set once the call holds a slot
        done: asyncio.Future = loop.create_future()
        holder: dict = {}

        def deliver(setter, value):
            if not done.done():
                setter(value)

        def send(setter, value):  # the caller may be gone (its timeout passed, its loop closed)
            try:
                loop.call_soon_threadsafe(deliver, setter, value)
            except RuntimeError:
                pass

        def work():
            with self._slots:
                if holder.get("abandoned"):  # its caller stopped waiting for a slot: do not run it
                    return
                send(running.set_result, None)
                try:
                    result = fn(*args, **kwargs)
                    if inspect.isawaitable(result):  # a plain function that hands back a coroutine
                        result = self.loop.submit(_awaited(result)).result()
                    send(done.set_result, result)
                except BaseException as e:  # the tool's error goes to the caller
                    send(done.set_exception, _as_exception(e))

        threading.Thread(target=work, name="verl_lite_tool", daemon=True).start()
        try:
            await running  # the deadline starts with the call, not with the wait for a slot
        except asyncio.CancelledError:
            holder["abandoned"] = True
            raise
        try:
            return await asyncio.wait_for(done, self.timeout_s)
        except asyncio.TimeoutError:
            raise ToolTimeout() from None

    def session(self, tools_kwargs: dict | None, tools: dict | None = None, truncation=None) -> ToolSession:
        """A trajectory's session; `tools` (name -> tool, default the runner's) are the ones it may call,
        `truncation` its (max_tool_response_length, tool_response_truncate_side) (default the runner's)."""
        return ToolSession(self, tools_kwargs or {}, tools, truncation)


class ToolSession:
    def __init__(self, runner: ToolRunner, tools_kwargs: dict, tools: dict | None = None, truncation=None):
        self.runner, self.tools_kwargs = runner, tools_kwargs
        self.tools = runner.tools if tools is None else tools
        self.truncation = truncation or (runner.max_response_length, runner.truncate_side)
        self.instances: dict[str, str] = {}  # tool name -> instance id
        self.create_failures: dict[str, str] = {}  # tool name -> why its create failed this turn
        self.stats = ToolStats()
        self.tool_rewards: list = []  # step rewards of the calls run, in call order (verl's tool_rewards)

    def _kwargs(self, name: str, which: str) -> dict:
        return dict((self.tools_kwargs.get(name) or {}).get(which) or {})

    async def run_turn(self, calls: list[ToolCall], max_parallel: int, agent_data=None) -> list[str]:
        """The texts the model gets for the first `max_parallel` calls, in order. `agent_data` (verl's
        AgentData) goes to each `execute` as the keyword agent_data, as verl passes it."""
        start = time.perf_counter()
        taken, self.stats.dropped = (
            calls[:max_parallel],
            self.stats.dropped + max(0, len(calls) - max_parallel),
        )
        names = {c.name for c in taken if c.error is None and c.name in self.tools}
        await asyncio.gather(*(self._create(n) for n in sorted(names - set(self.instances))))
        results = await asyncio.gather(
            *(self._one(c, agent_data) for c in taken)
        )  # (text, step reward) per call
        self.tool_rewards += [reward for _, reward in results if reward is not None]
        self.stats.seconds += time.perf_counter() - start
        return [text for text, _ in results]

    async def _create(self, name: str) -> None:
        """The tool's instance for this trajectory; on a failure, its cause, which the tool's calls of
        this turn then report (verl puts create's exception in the reply too); a later turn retries."""
        tool = self.tools[name]
        try:
            instance_id, _ = await self.runner.call(
                tool.create, create_kwargs=self._kwargs(name, "create_kwargs")
            )
            self.instances[name] = instance_id
            self.create_failures.pop(name, None)
        except ToolTimeout:
            self.create_failures[name] = f"create did not finish within {self.runner.timeout_s:g} s"
        except Exception as e:
            self.create_failures[name] = f"create failed: {type(e).__name__}: {e}"

    async def _one(self, call: ToolCall, agent_data=None) -> tuple[str, Any]:
        """The text for the model and the call's step reward (0.0 for a failed call, as in verl)."""
        tools = self.tools
        if call.error is not None:
            self.stats.malformed += 1
        if call.name and call.name not in tools:  # verl checks the name before the arguments
            self.stats.errors += 1
            return f"Unknown function '{call.name}'. Available tools: {list(tools)}", 0.0
        if call.error is not None:
            self.stats.errors += 1
            if call.bad_arguments:
                return f"Invalid JSON in arguments for '{call.name}': {call.error}", 0.0
            return f"Error executing tool{f' {call.name!r}' if call.name else ''}: {call.error}", 0.0
        self.stats.calls += 1
        start = time.perf_counter()
        failure = reward = None
        try:
            text, reward, failure = self._result(call.name, await self._execute(call, agent_data))
        except ToolTimeout:
            self.stats.timeouts += 1
            failure = f"did not finish within {self.runner.timeout_s:g} s"
        except CreateFailed as e:
            self.stats.errors += 1
            failure = str(e)
        except Exception as e:
            self.stats.errors += 1
            failure = f"{type(e).__name__}: {e}"
        finally:
            self.stats.latencies.append(time.perf_counter() - start)
        self.stats.outcome(call.name, failure)
        if failure is not None:
            return f"Error executing tool '{call.name}': {failure}", 0.0
        return text, reward

    async def _execute(self, call: ToolCall, agent_data=None):
        if call.name not in self.instances:
            raise CreateFailed(self.create_failures.get(call.name, "create failed"))
        tool = self.tools[call.name]
        kwargs = self._kwargs(call.name, "execute_kwargs")
        if agent_data is not None and takes_keyword(tool.execute, "agent_data"):
            kwargs["agent_data"] = agent_data  # verl's; an execute without the parameter cannot read it
        return await self.runner.call(tool.execute, self.instances[call.name], call.arguments, **kwargs)

    def _result(self, name: str, result) -> tuple[str | None, Any, str | None]:
        """(the text for the model, the step reward, None) or (None, None, why the result is unusable)."""
        response, reward = (result[0], result[1]) if isinstance(result, tuple) else (result, None)
        why = None
        if not hasattr(response, "text"):
            why = (
                f"{name}.execute returned {type(response).__name__}, not a ToolResponse (verl's contract: "
                "(ToolResponse(text=...), reward, metrics))"
            )
        elif getattr(response, "image", None) or getattr(response, "video", None):
            why = f"{name} returned an image or video; only text results are supported"
        if why is not None:
            self.stats.errors += 1
            return None, None, why
        return truncate(response.text or "", *self.truncation), as_reward(reward), None

    async def finish(self) -> dict[str, Any]:
        """calc_reward of each tool used (with calc_reward_kwargs), then release, also when calc_reward
        failed (each failure counted); name -> reward, as the tool returned it (a number as a float),
        as verl's rollout collected them."""
        rewards: dict[str, Any] = {}
        for name, instance_id in self.instances.items():
            tool = self.tools[name]
            try:
                reward = await self.runner.call(
                    tool.calc_reward, instance_id, **self._kwargs(name, "calc_reward_kwargs")
                )
                rewards[name] = as_reward(reward)
            except Exception:  # ToolTimeout too
                self.stats.errors += 1
            finally:  # an instance is released whatever calc_reward did (verl releases in a finally)
                try:
                    await self.runner.call(tool.release, instance_id, **self._kwargs(name, "release_kwargs"))
                except Exception:
                    self.stats.errors += 1
        self.instances.clear()
        return rewards
