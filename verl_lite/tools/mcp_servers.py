"""MCP servers for verl's `type: mcp` tools, through the MCP client library (`mcp`).

A servers file is verl's JSON (the `mcp.mcp_servers_config_path` of a tool entry):

    {"mcpServers": {"<name>": {"command": ..., "args": [...], "env": {...}, "cwd": ...}   # stdio
                    "<name>": {"url": ..., "auth_token": ...}}}                         # remote

as verl read it with fastmcp: a server with `auth_token` is an SSE endpoint called with
`Authorization: Bearer <token>`; any other `url` is Streamable HTTP, or SSE where its path holds
`/sse` (fastmcp's inference); `headers` are sent as given. Where one file names several servers
that are not SSE-with-token, fastmcp mounted them as one and named each tool `<server>_<tool>`;
a file with one such server keeps the tools' own names. Both are kept here, so a verl
tool_selected_list means the same.

`MCPServers` is one servers file in one process. `list_tools` (build time: the start-up check
before Ray, then each worker) connects, lists and disconnects, on a short-lived loop of its own.
`call_tool` runs on the worker's tool loop (agent_loop/tool_loop.py): the first call opens one
session per server, held by a task of that loop for the worker's life, so the server process
starts once per worker, not per call; closing the tool loop cancels that task, which ends the
session and stops the server (stdio_client terminates its process). A session whose transport
failed (the server died, the connection dropped) is dropped, and the next call opens a new one.
Sessions open with MCP's initialize handshake (`mode="legacy"`, what the clients verl used spoke), so
servers of every protocol revision answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from dataclasses import dataclass
from urllib.parse import urlparse

ROOT = "mcpServers"
STDIO_KEYS = ("command", "args", "env", "cwd", "transport", "description")
REMOTE_KEYS = ("url", "auth_token", "headers", "transport", "description")
LIST_TIMEOUT_S = 60.0  # a server that has not answered tools/list by then is refused


class MCPTransportError(RuntimeError):
    """The server could not be reached or stopped answering (not an error result of a tool)."""


@dataclass(frozen=True)
class Server:
    name: str
    spec: dict
    prefix: str  # "" or "<name>_" (fastmcp's mount prefix)

    def transport(self):
        """The `mcp` transport for this server (an async context manager of its streams)."""
        from mcp.client.sse import sse_client
        from mcp.client.stdio import StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        spec = self.spec
        if "command" in spec:
            params = StdioServerParameters(
                command=spec["command"],
                args=list(spec.get("args") or []),
                env=spec.get("env"),
                cwd=spec.get("cwd"),
            )
            return stdio_client(params, errlog=_errlog())
        headers = dict(spec.get("headers") or {})
        if spec.get("auth_token"):
            headers["Authorization"] = f"Bearer {spec['auth_token']}"
        if _is_sse(spec):
            return sse_client(spec["url"], headers=headers or None)
        if headers:
            import httpx2

            return streamable_http_client(spec["url"], http_client=httpx2.AsyncClient(headers=headers))
        return streamable_http_client(spec["url"])


def _is_sse(spec: dict) -> bool:
    return (
        bool(spec.get("auth_token"))
        or spec.get("transport") == "sse"
        or ("transport" not in spec and "/sse" in urlparse(spec["url"]).path)
    )


def _errlog():
    """Where a stdio server's stderr goes: the worker's own stderr (Ray forwards it)."""
    import sys

    return sys.stderr


def read_servers(path: str, where: str) -> list[Server]:
    """The servers of verl's JSON file, checked; ValueError naming `where` and the fix."""
    if not path or not isinstance(path, str):
        raise ValueError(
            f"{where}.mcp.mcp_servers_config_path is not set: give the path of verl's MCP servers JSON"
        )
    try:
        with open(path) as f:
            content = json.load(f)
    except FileNotFoundError:
        raise ValueError(
            f"{where}.mcp.mcp_servers_config_path={path!r}: no such file; fix the path"
        ) from None
    except (OSError, ValueError) as e:
        raise ValueError(f"{where}.mcp.mcp_servers_config_path={path!r} is not readable JSON ({e})") from None
    servers = content.get(ROOT) if isinstance(content, dict) else None
    if not isinstance(servers, dict) or not servers:
        raise ValueError(f"{where}: {path} must hold a non-empty object {ROOT!r} (verl's MCP servers format)")
    for name, spec in servers.items():
        _check(spec, f"{where}: {path}: {ROOT}.{name}")
    merged = [n for n, s in servers.items() if not ("url" in s and _is_sse(s) and s.get("auth_token"))]
    return [
        Server(name, spec, f"{name}_" if len(merged) > 1 and name in merged else "")
        for name, spec in servers.items()
    ]


def _check(spec, where: str) -> None:
    if not isinstance(spec, dict) or ("command" in spec) == ("url" in spec):
        raise ValueError(f"{where} must give either `command` (a stdio server) or `url` (a remote one)")
    keys = STDIO_KEYS if "command" in spec else REMOTE_KEYS
    unknown = sorted(set(spec) - set(keys))
    if unknown:
        raise ValueError(f"{where} has keys {unknown} that are not read; the keys are {list(keys)}")
    if "command" in spec:
        if not isinstance(spec["command"], str) or not spec["command"]:
            raise ValueError(f"{where}.command must be a non-empty string")
        if not isinstance(spec.get("args", []), list):
            raise ValueError(f"{where}.args must be a list of strings")
        if not isinstance(spec.get("env") or {}, dict):
            raise ValueError(f"{where}.env must be an object of strings")
    elif not str(spec["url"]).startswith(("http://", "https://")):
        raise ValueError(f"{where}.url={spec['url']!r} must be an http(s) URL")


class MCPServers:
    """One servers file in this process: listing at build time, one session per server for calls."""

    def __init__(self, path: str, servers: list[Server]):
        self.path, self.servers = path, servers
        self.owner: dict[str, Server] = {}  # tool name as the model sees it -> its server
        self._sessions: dict[str, tuple] = {}  # server name -> (loop, session, stop event, task)
        self._opening: dict[str, asyncio.Future] = {}

    # -- build time --------------------------------------------------------------------------
    def list_tools(self, where: str) -> list:
        """Every server's tools (mcp Tool objects, names prefixed as fastmcp did); ValueError naming
        the server when one does not start or answer. Runs its own loop in a thread of its own."""
        box: dict = {}

        def work():
            try:
                box["tools"] = asyncio.run(self._list_all(where))
            except BaseException as e:  # re-raised below, in the caller's thread
                box["error"] = e

        thread = threading.Thread(target=work, name="verl_lite-mcp-list", daemon=True)
        thread.start()
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["tools"]

    async def _list_all(self, where: str) -> list:
        tools = []
        for server in self.servers:
            try:
                listed = await asyncio.wait_for(self._list_one(server), LIST_TIMEOUT_S)
            except Exception as e:
                raise ValueError(
                    f"{where}: MCP server {server.name!r} of {self.path} did not start or list its tools "
                    f"({_message(e)}); fix its entry ({_how(server)})"
                ) from None
            for tool in listed:
                name = server.prefix + tool.name
                self.owner[name] = server
                _OWNERS[name] = self
                tools.append(tool.model_copy(update={"name": name}))
        return tools

    async def _list_one(self, server: Server) -> list:
        from mcp import Client
        from mcp.types import PaginatedRequestParams

        async with Client(server.transport(), mode="legacy") as client:
            listed, cursor = [], None
            while True:
                page = await client.session.list_tools(
                    params=PaginatedRequestParams(cursor=cursor) if cursor else None
                )
                listed += page.tools
                cursor = page.next_cursor
                if not cursor:
                    return listed

    # -- calls, on the worker's tool loop ------------------------------------------------------
    async def call_tool(self, name: str, arguments: dict, timeout_s: float):
        """The server's CallToolResult for `name`; MCPTransportError when the server cannot be
        reached or does not answer within `timeout_s`; mcp's MCPError for a JSON-RPC error."""
        from mcp import MCPError

        server = self.owner[name]
        session = await self._session(server)
        try:
            return await session.call_tool(
                name[len(server.prefix) :], arguments, read_timeout_seconds=timeout_s
            )
        except MCPError as e:
            if _is_timeout(e):  # the session stays: the server may answer later calls
                raise MCPTransportError(
                    f"MCP server {server.name!r} did not answer within {timeout_s:g} s"
                ) from None
            if _is_closed(e):
                self._drop(server)
                raise MCPTransportError(f"MCP server {server.name!r} closed the connection") from None
            raise
        except Exception as e:  # the transport's own (anyio's closed or broken streams, OSError, ...)
            self._drop(server)
            raise MCPTransportError(f"MCP server {server.name!r}: {_message(e)}") from None

    async def _session(self, server: Server):
        loop = asyncio.get_running_loop()
        held = self._sessions.get(server.name)
        if held is not None and held[0] is loop and not held[3].done():
            return held[1]
        opening = self._opening.get(server.name)
        if opening is None or opening.get_loop() is not loop:
            opening = loop.create_future()
            self._opening[server.name] = opening
            loop.create_task(self._hold(server, opening), name=f"verl_lite-mcp-{server.name}")
        try:
            return await asyncio.shield(opening)
        except MCPTransportError:
            raise
        except Exception as e:
            raise MCPTransportError(f"MCP server {server.name!r} did not start ({_message(e)})") from None

    async def _hold(self, server: Server, opened: asyncio.Future) -> None:
        """Open the session, publish it, and keep it open until cancelled (the tool loop's close)."""
        from mcp import Client

        stop = asyncio.Event()
        try:
            async with Client(server.transport(), mode="legacy") as client:
                self._sessions[server.name] = (
                    asyncio.get_running_loop(),
                    client.session,
                    stop,
                    asyncio.current_task(),
                )
                opened.set_result(client.session)
                await stop.wait()
        except BaseException as e:
            if not opened.done():
                opened.set_exception(e if isinstance(e, Exception) else MCPTransportError("cancelled"))
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            held = self._sessions.get(server.name)
            if held is not None and held[3] is asyncio.current_task():
                del self._sessions[server.name]
            if self._opening.get(server.name) is opened:
                del self._opening[server.name]

    def _drop(self, server: Server) -> None:
        """End the server's session (the next call opens a new one)."""
        held = self._sessions.pop(server.name, None)
        self._opening.pop(server.name, None)
        if held is not None:
            held[2].set()


def _message(e: BaseException) -> str:
    """`Type: text` of the exception, of the ones inside where anyio grouped them."""
    if isinstance(getattr(e, "exceptions", None), (list, tuple)):  # an (anyio) exception group
        return "; ".join(_message(x) for x in e.exceptions)
    text = e.message if hasattr(e, "message") and hasattr(e, "code") else str(e)  # mcp's MCPError
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _is_timeout(e) -> bool:
    from mcp_types import REQUEST_TIMEOUT

    return e.code == REQUEST_TIMEOUT


def _is_closed(e) -> bool:
    from mcp_types import CONNECTION_CLOSED

    return e.code == CONNECTION_CLOSED


def _how(server: Server) -> str:
    if "command" in server.spec:
        return f"command {server.spec['command']!r} args {server.spec.get('args') or []}"
    return f"url {server.spec['url']!r}"


_REGISTRY: dict[tuple, MCPServers] = {}
_OWNERS: dict[str, MCPServers] = {}  # tool name -> the servers that listed it (verl's tool_client_mapping)
_LOCK = threading.Lock()


def servers_for(path: str, where: str) -> MCPServers:
    """The process's one MCPServers of `path` (read and checked once per file content)."""
    servers = read_servers(path, where)
    key = (os.path.abspath(path), json.dumps([(s.name, s.spec) for s in servers], sort_keys=True))
    with _LOCK:
        if key not in _REGISTRY:
            _REGISTRY[key] = MCPServers(path, servers)
        return _REGISTRY[key]


def servers_of(tool_name: str) -> MCPServers | None:
    """The servers that listed `tool_name` in this process (None: none did)."""
    return _OWNERS.get(tool_name)
