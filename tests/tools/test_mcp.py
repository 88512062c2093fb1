"""verl's `type: mcp` tools against a real MCP server over stdio (tests/helpers/mcp_server.py, the
`mcp` package's server), through the `mcp` client library: the listed tools (kept to
tool_selected_list) with the server's schemas, calls through the worker's tool runner, an error
result read as verl read it, a server that dies mid-run, and the start-up refusals."""

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.helpers.dist import free_port
from tests.helpers.mcp_server import ROOT, calls, write_configs
from verl_lite.agent_loop.tool_calls import ToolRunner
from verl_lite.agent_loop.tool_parser import ToolCall
from verl_lite.tools.mcp_tool import MCPBaseTool, MCPSearchTool
from verl_lite.tools.registry import build_tools, check_tool_config


def run_turns(runner: ToolRunner, *turns: list[ToolCall]) -> tuple[list[list[str]], dict, dict]:
    """Each turn's texts for the model, the tools' calc_reward, and the trajectory's stats."""

    async def trajectory():
        session = runner.session({})
        texts = [await session.run_turn(turn, 8) for turn in turns]
        return texts, await session.finish(), session.stats.as_dict()

    return asyncio.run(trajectory())


def wait_for_port(port: int, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"no MCP server on port {port}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)  # reaps it where it is our child
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return not alive(pid)


def test_listed_tools_with_the_servers_schemas_calls_and_an_error_result(tmp_path):
    config, log = write_configs(tmp_path)
    tools = build_tools(str(config))
    assert sorted(tools) == ["add", "calc"] and all(type(t) is MCPBaseTool for t in tools.values())
    function = tools["add"].tool_schema.model_dump(exclude_none=True)["function"]
    assert function["description"] == "Add two integers."
    assert function["parameters"]["properties"] == {
        "a": {"type": "integer", "title": "A"},
        "b": {"type": "integer", "title": "B"},
    }
    assert function["parameters"]["required"] == ["a", "b"]

    runner = ToolRunner(tools, timeout_s=30, max_response_length=1000, truncate_side="middle")
    texts, rewards, stats = run_turns(
        runner,
        [
            ToolCall(name="add", arguments={"a": 2, "b": 3}),
            ToolCall(name="calc", arguments={"expression": "1/0"}),
        ],
        [ToolCall(name="calc", arguments={"expression": "6*7"})],
    )
    # the error result of the tool is what the model reads, as verl's MCPBaseTool passed it on
    assert texts == [["5", "Error executing tool calc: division by zero"], ["42"]]
    assert rewards == {"add": ["5"], "calc": ["Error executing tool calc: division by zero", "42"]}
    assert stats["num_tool_calls"] == 3 and stats["tool_errors"] == 0

    served = calls(log)
    listing_pid, session_pid = (r["pid"] for r in served if r.get("started"))  # one listing, one session
    assert sorted(r["tool"] for r in served if "tool" in r) == ["add", "calc", "calc"]
    assert {r["pid"] for r in served if "tool" in r} == {session_pid}  # one server process for the worker
    assert wait_gone(listing_pid)
    assert alive(session_pid)
    runner.loop.close()  # the worker's end: the session closes and its server stops
    assert wait_gone(session_pid)


def test_tool_selected_list_and_verls_search_class(tmp_path):
    config, _ = write_configs(
        tmp_path, selected=["calc"], class_name="verl.tools.mcp_search_tool.MCPSearchTool"
    )
    tools = build_tools(str(config))
    assert list(tools) == ["calc"] and type(tools["calc"]) is MCPSearchTool


def test_a_server_that_dies_fails_its_call_and_the_next_call_starts_it_again(tmp_path):
    config, log = write_configs(tmp_path, selected=["add"])
    runner = ToolRunner(
        build_tools(str(config)), timeout_s=30, max_response_length=1000, truncate_side="middle"
    )
    (first,), _, _ = run_turns(runner, [ToolCall(name="add", arguments={"a": 1, "b": 1})])
    assert first == ["2"]
    pid = [r["pid"] for r in calls(log) if "tool" in r][-1]
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid)
    texts, _, stats = run_turns(
        runner,
        [ToolCall(name="add", arguments={"a": 1, "b": 2})],
        [ToolCall(name="add", arguments={"a": 2, "b": 2})],
    )
    assert texts[0][0].startswith("Error executing tool 'add': MCPTransportError: MCP server 'calc'"), texts
    assert texts[1] == ["4"]
    assert stats["tool_errors"] == 1 and stats["tool_outcomes"]["add"][:2] == [2, 1]
    served = [r for r in calls(log) if "tool" in r]
    assert served[-1]["pid"] != pid and served[-1]["arguments"] == {"a": 2, "b": 2}
    runner.loop.close()


def test_a_users_subclass_of_verls_mcp_tool_reads_the_results(tmp_path):
    config, log = write_configs(
        tmp_path, selected=["add"], class_name="tests.compat.verl_style_mcp.LabelledMCPTool"
    )
    runner = ToolRunner(
        build_tools(str(config)), timeout_s=30, max_response_length=1000, truncate_side="middle"
    )
    texts, _, _ = run_turns(runner, [ToolCall(name="add", arguments={"a": 1, "b": 2})])
    assert texts == [["result: 3"]]
    runner.loop.close()


@pytest.mark.parametrize(
    "case, expected",
    [
        ("no_file", "mcp.mcp_servers_config_path="),
        ("not_starting", "did not start or list its tools (MCPError: Connection closed); fix its entry"),
        ("not_listed", "tool_selected_list names ['search'], which no server of"),
        ("bad_server_key", "mcpServers.calc has keys ['cmd'] that are not read"),
    ],
)
def test_bad_mcp_config_is_one_line_at_start_up(tmp_path, case, expected):
    servers = {
        "not_starting": {"calc": {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]}},
        "bad_server_key": {"calc": {"cmd": "x", "command": "y"}},
    }.get(case)
    config, _ = write_configs(
        tmp_path, selected=["search"] if case == "not_listed" else None, servers=servers
    )
    if case == "no_file":
        (tmp_path / "mcp_server.json").unlink()
    (problem,) = check_tool_config(str(config))
    assert expected in problem and str(config) in problem and "\n" not in problem, problem
    if case == "no_file":
        assert "no such file; fix the path" in problem


def test_verls_url_servers_and_several_servers_in_one_file(tmp_path):
    """verl's remote servers (Streamable HTTP by URL, SSE with a bearer token) beside a stdio one:
    the servers fastmcp mounted together name their tools `<server>_<tool>`, the SSE server with
    its token keeps its own names (verl's McpClientManager), and each call reaches its server."""
    servers, procs = {}, []
    try:
        for transport, name in (("streamable-http", "web"), ("sse", "search")):
            port = free_port()
            log = tmp_path / f"{name}.jsonl"
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.helpers.mcp_server", str(log), transport, str(port)],
                    cwd=ROOT,
                    stderr=subprocess.DEVNULL,
                )
            )
            wait_for_port(port)
            path = "/mcp" if transport == "streamable-http" else "/sse"
            servers[name] = {"url": f"http://127.0.0.1:{port}{path}"}
        servers["search"]["auth_token"] = "secret"
        (tmp_path / "stdio").mkdir()
        write_configs(tmp_path / "stdio")
        servers["local"] = json.loads((tmp_path / "stdio" / "mcp_server.json").read_text())["mcpServers"][
            "calc"
        ]
        config, _ = write_configs(tmp_path, servers=servers)
        tools = build_tools(str(config))
        assert sorted(tools) == ["add", "calc", "local_add", "local_calc", "web_add", "web_calc"]
        runner = ToolRunner(tools, timeout_s=30, max_response_length=1000, truncate_side="middle")
        texts, _, stats = run_turns(
            runner,
            [
                ToolCall(name="web_add", arguments={"a": 1, "b": 2}),
                ToolCall(name="calc", arguments={"expression": "2*5"}),
                ToolCall(name="local_calc", arguments={"expression": "3*3"}),
            ],
        )
        assert texts == [["3", "10", "9"]] and stats["tool_errors"] == 0
        assert [r["tool"] for r in calls(tmp_path / "web.jsonl") if "tool" in r] == ["add"]
        assert [r["tool"] for r in calls(tmp_path / "search.jsonl") if "tool" in r] == ["calc"]
        runner.loop.close()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
