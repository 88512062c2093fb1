"""Tool calls from the agent loop: concurrent, bounded by the timeout, every failure a message."""

import asyncio
import logging
import time

import numpy as np
import torch

from tests.helpers.agent import tool_entry, user_tool, write_yaml
from verl_lite.agent_loop.metrics import FailingToolReport, failing_tools
from verl_lite.agent_loop.tool_calls import ToolRunner, truncate
from verl_lite.agent_loop.tool_parser import ToolCall
from verl_lite.protocol import DataProto
from verl_lite.tools.registry import build_tools


def runner(tmp_path, timeout_s=1.0, max_len=256, side="middle"):
    entries = [
        tool_entry(user_tool("EchoTool"), "echo", {"text": "t"}),
        tool_entry(user_tool("SleepTool"), "sleep", {"seconds": "s"}),
        tool_entry(user_tool("AwaitForeverTool"), "wait"),
        tool_entry(user_tool("RaisingTool"), "fail"),
        tool_entry(user_tool("ImageTool"), "image"),
    ]
    tools = build_tools(write_yaml(tmp_path / "tools.yaml", {"tools": entries}))
    return ToolRunner(tools, timeout_s=timeout_s, max_response_length=max_len, truncate_side=side)


def test_results_errors_and_counts_in_call_order(tmp_path):
    r = runner(tmp_path)
    kwargs = {"echo": {"create_kwargs": {"prefix": "> "}, "calc_reward_kwargs": {"scale": 10.0}}}
    session = r.session(kwargs)

    async def episode():
        first = await session.run_turn(
            [
                ToolCall("echo", {"text": "hi"}),
                ToolCall("", error="the tool call is not valid JSON (x at char 0)"),
                ToolCall("nope", {}),
                ToolCall("fail", {}),
                ToolCall("image", {}),
            ],
            max_parallel=5,
        )
        second = await session.run_turn(
            [ToolCall("echo", {"text": "again"}), ToolCall("echo", {"text": "x"})], 1
        )
        return first, second, await session.finish()

    first, second, rewards = asyncio.run(episode())
    assert first == [
        "> hi",
        "Error executing tool: the tool call is not valid JSON (x at char 0)",
        "Unknown function 'nope'. Available tools: ['echo', 'sleep', 'wait', 'fail', 'image']",
        "Error executing tool 'fail': RuntimeError: the service is down",
        "Error executing tool 'image': image returned an image or video; only text results are supported",
    ]
    assert second == ["> again"]  # the instance (and its prefix) spans the episode; the 2nd call dropped
    # calc_reward of every tool used: echo's 2 calls x its calc_reward_kwargs.scale; BaseTool's 0
    assert rewards == {"echo": 20.0, "fail": 0.0, "image": 0.0}
    s = session.stats
    assert (s.calls, s.errors, s.timeouts, s.malformed, s.dropped) == (4, 4, 0, 1, 1)
    assert len(s.latencies) == 4
    # verl's tool_rewards: each call's step reward in call order, 0.0 for each failed call (malformed,
    # unknown, raised, image); none for the dropped call
    assert session.tool_rewards == [0.5, 0.0, 0.0, 0.0, 0.0, 0.5]
    echo = r.tools["echo"]
    assert len(echo.released) == 1 and echo.state == {}


def test_an_instance_is_released_when_its_calc_reward_fails(tmp_path):
    entries = [tool_entry(user_tool("BadRewardTool"), "grade", {"text": "t"})]
    r = ToolRunner(build_tools(write_yaml(tmp_path / "tools.yaml", {"tools": entries})), 5.0, 256, "middle")
    session = r.session({})

    async def episode():
        texts = await session.run_turn([ToolCall("grade", {"text": "x"})], 1)
        return texts, await session.finish()

    texts, rewards = asyncio.run(episode())
    tool = r.tools["grade"]
    assert texts == ["x"] and rewards == {}
    assert len(tool.released) == 1 and tool.state == {}  # released although calc_reward raised
    assert session.stats.errors == 1  # the calc_reward failure is still counted


def test_a_failed_create_tells_the_model_its_cause(tmp_path):
    entries = [tool_entry(user_tool("BadCreateTool"), "box")]
    r = ToolRunner(build_tools(write_yaml(tmp_path / "tools.yaml", {"tools": entries})), 5.0, 256, "middle")
    session = r.session({})
    (text,) = asyncio.run(session.run_turn([ToolCall("box", {})], 1))
    assert text == "Error executing tool 'box': create failed: ConnectionError: sandbox quota exceeded"
    assert session.stats.per_tool["box"] == [1, 1, "create failed: ConnectionError: sandbox quota exceeded"]


def test_a_hanging_tool_costs_its_timeout_and_no_more(tmp_path):
    r = runner(tmp_path, timeout_s=0.5)
    session = r.session({})

    async def turn():
        start = time.monotonic()
        texts = await session.run_turn(
            [ToolCall("sleep", {"seconds": "20"}), ToolCall("wait", {}), ToolCall("echo", {"text": "ok"})], 3
        )
        return texts, time.monotonic() - start

    texts, seconds = asyncio.run(turn())
    assert texts == [
        "Error executing tool 'sleep': did not finish within 0.5 s",
        "Error executing tool 'wait': did not finish within 0.5 s",
        "ok",
    ]
    assert seconds < 10, f"a 20 s tool held the turn {seconds:.1f} s with a 0.5 s timeout"
    assert (session.stats.timeouts, session.stats.errors, session.stats.calls) == (2, 0, 3)


def test_execute_kwargs_the_tool_does_not_accept_fail_the_call_at_once(tmp_path):
    """The TypeError of binding the arguments is the call's error, told at once; not a thread that
    dies and a caller that waits the whole timeout and reports a timeout."""
    entries = [tool_entry(user_tool("StrictTool"), "strict")]
    tools = build_tools(write_yaml(tmp_path / "tools.yaml", {"tools": entries}))
    r = ToolRunner(tools, timeout_s=3.0, max_response_length=256, truncate_side="middle")
    session = r.session({"strict": {"execute_kwargs": {"bogus": 1}}})

    async def turn():
        start = time.monotonic()
        texts = await session.run_turn([ToolCall("strict", {})], 1)
        return texts, time.monotonic() - start

    (text,), seconds = asyncio.run(turn())
    assert text.startswith("Error executing tool 'strict': TypeError: "), text
    assert "unexpected keyword argument 'bogus'" in text, text
    assert seconds < 2, f"the call took {seconds:.1f} s"
    assert (session.stats.errors, session.stats.timeouts) == (1, 0)


def test_a_call_queued_for_a_slot_is_timed_from_when_it_starts(tmp_path):
    """With one slot, three 0.6 s calls run one after another (1.8 s); each is within its 1 s
    timeout from when it starts, so none times out for the time it waited for the slot."""
    entries = [tool_entry(user_tool("SleepTool"), "sleep", {"seconds": "s"})]
    tools = build_tools(write_yaml(tmp_path / "tools.yaml", {"tools": entries}))
    r = ToolRunner(tools, timeout_s=1.0, max_response_length=256, truncate_side="middle", pool_size=1)
    session = r.session({})
    texts = asyncio.run(session.run_turn([ToolCall("sleep", {"seconds": "0.6"})] * 3, 3))
    assert texts == ["slept"] * 3
    assert session.stats.timeouts == 0


def test_calls_of_a_turn_run_concurrently(tmp_path):
    r = runner(tmp_path, timeout_s=30)

    async def turn():
        start = time.monotonic()
        await r.session({}).run_turn([ToolCall("sleep", {"seconds": "1"})] * 4, 4)
        return time.monotonic() - start

    assert asyncio.run(turn()) < 3.5  # 4 x 1 s one after another would take 4 s


def test_truncation_is_verls():
    text = "abcdefghij"
    assert truncate(text, 20, "middle") == text
    # verl 0.9.1 tool_agent_loop.py: the side named is the side cut
    assert truncate(text, 4, "left") == "(truncated)...ghij"
    assert truncate(text, 4, "right") == "abcd...(truncated)"
    assert truncate(text, 4, "middle") == "ab...(truncated)...ij"


def test_a_tool_failing_in_every_call_of_a_step_is_said_once_with_its_cause(tmp_path, caplog):
    """A result of the wrong type fails every call: the model is told why, each trajectory records
    its tools' outcomes, and the driver says once per tool and cause on the console (not only in
    agent_loop/num_tool_errors) which tool failed every call and the first failure's text."""
    entries = [
        tool_entry(user_tool("StrTool"), "str", {"text": "t"}),
        tool_entry(user_tool("EchoTool"), "echo"),
    ]
    tools = build_tools(write_yaml(tmp_path / "tools.yaml", {"tools": entries}))
    r = ToolRunner(tools, timeout_s=5.0, max_response_length=256, truncate_side="middle")

    async def trajectory(calls):
        session = r.session({})
        texts = await session.run_turn(calls, max_parallel=4)
        await session.finish()
        return texts, session.stats.as_dict()

    one, first = asyncio.run(trajectory([ToolCall("str", {"text": "1"}), ToolCall("echo", {"text": "e"})]))
    _, second = asyncio.run(trajectory([ToolCall("str", {"text": "2"}), ToolCall("str", {"text": "3"})]))
    assert one == [
        "Error executing tool 'str': str.execute returned str, not a ToolResponse (verl's contract: "
        "(ToolResponse(text=...), reward, metrics))",
        "e",
    ]
    assert first["tool_outcomes"]["echo"] == [1, 0, None] and second["tool_outcomes"]["str"][:2] == [2, 2]
    batch = DataProto.from_dict(
        {"x": torch.zeros(2, 1)}, {"agent_loop_stats": np.array([first, second], dtype=object)}
    )
    assert failing_tools(batch) == {"str": (3, one[0].removeprefix("Error executing tool 'str': "))}
    report = FailingToolReport()
    with caplog.at_level(logging.WARNING, logger="verl_lite"):
        report(batch, 1)
        report(batch, 2)  # the same tool and cause: not said again
    said = [rec.getMessage() for rec in caplog.records if rec.getMessage().startswith("tool ")]
    assert said == [
        "tool str: all 3 calls of step 1 failed, the first with: str.execute returned str, not a ToolResponse "
        "(verl's contract: (ToolResponse(text=...), reward, metrics)) (the model is told so and the run goes "
        "on; see agent_loop/num_tool_errors)"
    ], said


def _many_trajectories(tmp_path, entry, calls: int, timeout_s: float = 10.0):
    """`calls` trajectories, each calling the one tool once, all at once (as a turn of a batch does)."""
    tools = build_tools(write_yaml(tmp_path / "tools.yaml", {"tools": [entry]}))
    r = ToolRunner(tools, timeout_s=timeout_s, max_response_length=256, truncate_side="middle")
    name = next(iter(tools))

    async def trajectory():
        session = r.session({})
        texts = await session.run_turn([ToolCall(name, {})], 1)
        await session.finish()
        return texts[0], session.stats

    async def all_of_them():
        return await asyncio.gather(*(trajectory() for _ in range(calls)))

    return tools[name], asyncio.run(all_of_them())


def test_a_semaphore_made_in_init_limits_every_call(tmp_path):
    """16 concurrent calls through one asyncio.Semaphore(4) of the tool: all 16 succeed (on a fresh
    loop per call, 14 of 16 failed with "bound to a different event loop"), at most 4 inside at once."""
    entry = tool_entry(user_tool("SemaphoreTool"), "api", limit=4)
    tool, results = _many_trajectories(tmp_path, entry, 16)
    assert [text for text, _ in results] == ["ok"] * 16
    assert sum(stats.errors + stats.timeouts for _, stats in results) == 0
    assert tool.most_inside == 4


def test_a_lock_made_in_init_serialises_calls_without_hanging(tmp_path):
    """16 concurrent calls through one asyncio.Lock of the tool all return, well within the timeout
    (on a fresh loop per call, 15 of 16 hung until it)."""
    tool, results = _many_trajectories(tmp_path, tool_entry(user_tool("LockTool"), "locked"), 16, 5.0)
    assert sorted(int(text) for text, _ in results) == list(range(1, 17))
    assert tool.count == 16


def test_tools_share_one_loop_across_rollout_calls(tmp_path):
    """A tool's semaphore keeps working when the next rollout call runs on a new agent-loop event loop."""
    entry = tool_entry(user_tool("SemaphoreTool"), "api", limit=2)
    tools = build_tools(write_yaml(tmp_path / "tools.yaml", {"tools": [entry]}))
    r = ToolRunner(tools, timeout_s=10.0, max_response_length=256, truncate_side="middle")

    async def turn():
        return await asyncio.gather(*(r.session({}).run_turn([ToolCall("api", {})], 1) for _ in range(6)))

    for _ in range(3):  # asyncio.run: a new event loop each time, as each rollout call has
        assert asyncio.run(turn()) == [["ok"]] * 6


def test_a_blocking_plain_method_stalls_no_async_call(tmp_path):
    """A plain `def` method that blocks runs in a thread: the async calls of the same turn finish at
    once, and the blocking one still times out."""
    entries = [
        tool_entry(user_tool("SleepTool"), "sleep", {"seconds": "s"}),
        tool_entry(user_tool("SemaphoreTool"), "api"),
    ]
    tools = build_tools(write_yaml(tmp_path / "tools.yaml", {"tools": entries}))
    r = ToolRunner(tools, timeout_s=1.0, max_response_length=256, truncate_side="middle")

    async def turn():
        session = r.session({})
        start = time.monotonic()
        slow = asyncio.ensure_future(session.run_turn([ToolCall("sleep", {"seconds": "5"})], 1))
        fast = await r.session({}).run_turn([ToolCall("api", {})] * 4, 4)
        return fast, time.monotonic() - start, await slow

    fast, seconds, slow = asyncio.run(turn())
    assert fast == ["ok"] * 4 and seconds < 0.9, seconds
    assert slow == ["Error executing tool 'sleep': did not finish within 1 s"]
