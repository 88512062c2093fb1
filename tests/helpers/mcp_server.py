"""A small MCP server over stdio for the tests (the `mcp` package's MCPServer), and verl's config
files that name it.

Run as `python -m tests.helpers.mcp_server <log file> [stdio|sse|streamable-http <port>]`: it offers the tool demo's `calc(expression)`
(its value, as the demo's calculator tool writes it; an error result for a bad expression) and
`add(a, b)` (their sum), and appends one JSON line per call to the log file
({"pid", "tool", "arguments"}) and one {"pid", "started": true} at start, so a test sees which
process served which call.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def serve(log_path: str, transport: str = "stdio", port: int = 0) -> None:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from verl_lite.tools.calculator import evaluate, format_value

    server = MCPServer("verl_lite-test")  # Streamable HTTP at /mcp, SSE at /sse

    def log(**record) -> None:
        with open(log_path, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), **record}) + "\n")

    @server.tool()
    def calc(expression: str) -> str:
        """Evaluate an arithmetic expression of integers with + - * / and parentheses."""
        log(tool="calc", arguments={"expression": expression})
        try:  # the tool demo's calculator (parsed, never run as code)
            return format_value(evaluate(expression))
        except (ValueError, ZeroDivisionError) as e:
            raise ToolError(str(e) or type(e).__name__) from None  # an error result, not a crash

    @server.tool()
    def add(a: int, b: int) -> str:
        """Add two integers."""
        log(tool="add", arguments={"a": a, "b": b})
        return str(a + b)

    log(started=True)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run(transport, host="127.0.0.1", port=port)


def calls(log_path) -> list[dict]:
    """The logged lines, in order."""
    path = Path(log_path)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def write_configs(
    folder: Path,
    selected: list[str] | None = None,
    class_name="verl.tools.mcp_base_tool.MCPBaseTool",
    servers: dict | None = None,
    **config,
) -> tuple[Path, Path]:
    """verl's servers JSON naming this server (started with the tests' Python) and verl's tool
    config YAML naming the servers file; (tool config path, log path)."""
    log = folder / "mcp_calls.jsonl"
    servers = servers or {
        "calc": {
            "command": sys.executable,
            "args": ["-m", "tests.helpers.mcp_server", str(log)],
            "env": {"PYTHONPATH": str(ROOT)},
            "cwd": str(ROOT),
        }
    }
    (folder / "mcp_server.json").write_text(json.dumps({"mcpServers": servers}))
    mcp = {"mcp_servers_config_path": str(folder / "mcp_server.json")}
    if selected is not None:
        mcp["tool_selected_list"] = selected
    entry = {
        "class_name": class_name,
        "config": {"type": "mcp", "rate_limit": 120, "timeout": 120, **config},
        "mcp": mcp,
    }
    (folder / "mcp_tool_config.yaml").write_text(yaml.safe_dump({"tools": [entry]}))
    return folder / "mcp_tool_config.yaml", log


if __name__ == "__main__":
    serve(sys.argv[1], *sys.argv[2:3], *[int(p) for p in sys.argv[3:4]])
