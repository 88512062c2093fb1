"""verl's MCP tools, `MCPBaseTool` and `MCPSearchTool`: each is one tool an MCP server lists (its
name and JSON schema come from the server: tools/registry.py builds one per listed tool), and a
call goes to that server (tools/mcp_servers.py, the `mcp` client library).

verl 0.9.1 no longer ships them ("MCP tool is removed for now", verl/tools/tool_registry.py); their
behaviour here is that of verl's last ones (verl-project/verl verl/tools/mcp_base_tool.py and
mcp_search_tool.py, before 4f8f4c01b):
  - the model reads the text parts of the result joined by a space (`_parse_tool_result`, which a
    user's subclass overrides, as verl's docs say); an error result of the tool (`isError`) is read
    the same way, so the model sees the server's error text;
  - a JSON-RPC error of the call is `"\\n Tool call failed: <error>"`, missing parameters
    `{"result": "Error: 'parameters' is missing or empty."}`; the step reward is 0.0;
  - `calc_reward` returns the list of the instance's result texts (verl's);
  - config keys: `type: mcp`, `timeout` (30 s: here the wait for one call's answer; verl read it but
    did not use it), `rate_limit` (calls per second per worker, verl's token bucket; 10).

Where verl_lite differs, on purpose: a server that cannot be reached or dies mid-call makes the call
fail (the model reads `Error executing tool '<name>': ...`, the rollout counts it in tool_errors, and the
next call starts the server again), where verl returned `"\\n Connection failed: ..."` as if the tool
had answered; and a tool listed by no server is refused when the tools are built (before Ray).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
import uuid
from typing import Any

from verl_lite.tools import mcp_servers
from verl_lite.tools.base import BaseTool, ToolResponse, refuse_unread_keys

log = logging.getLogger(__name__)
CONFIG_KEYS = ("timeout", "rate_limit")


class TokenBucket:
    """verl's rate limiter: `rate_limit` calls per second, bursts up to that many."""

    def __init__(self, rate_limit: float):
        self.rate_limit = rate_limit
        self.tokens = rate_limit
        self.last_update = time.time()
        self.lock = threading.Lock()

    def acquire(self) -> bool:
        with self.lock:
            now = time.time()
            self.tokens = min(self.rate_limit, self.tokens + (now - self.last_update) * self.rate_limit)
            self.last_update = now
            if self.tokens >= 1:
                self.tokens -= 1
                return True
            return False


_BUCKETS: dict[float, TokenBucket] = {}  # one per worker process, as verl's ClientManager held one


class MCPBaseTool(BaseTool):
    def __init__(self, config: dict, tool_schema):
        refuse_unread_keys(config, CONFIG_KEYS, "MCP tool")
        super().__init__(config, tool_schema)
        self._instance_dict: dict[str, dict] = {}
        self.timeout = _positive(config.get("timeout", 30), "timeout")
        rate = _positive(config.get("rate_limit", 10.0), "rate_limit")
        self._bucket = _BUCKETS.setdefault(rate, TokenBucket(rate))
        self.servers = mcp_servers.servers_of(self.name)  # the servers file that listed it (registry.py)
        if self.servers is None:
            raise ValueError(
                f"no MCP server listed a tool {self.name!r}: an MCP tool is built from `config.type: mcp` "
                "and its `mcp:` block (mcp_servers_config_path)"
            )

    async def create(self, instance_id: str | None = None, **kwargs) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid.uuid4())
        self._instance_dict[instance_id] = {"response": "", "reward": []}
        return instance_id, ToolResponse()

    async def _call_tool(self, instance_id, parameters) -> tuple[str, dict]:
        from mcp import MCPError

        while not self._bucket.acquire():
            await asyncio.sleep(0.1)
        metadata: dict = {"api_request_error": None}
        try:
            result = await self.servers.call_tool(self.name, parameters, self.timeout)
        except MCPError as e:  # the server answered with a JSON-RPC error (verl: fastmcp's ClientError)
            err_msg = f"\n Tool call failed: {e.message}"
            return err_msg, {"api_request_error": err_msg}
        text, parsed = self._parse_tool_result(result.content)
        metadata.update(parsed)
        return text, metadata

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs):
        if not self.name or parameters is None:
            return (
                ToolResponse(text=json.dumps({"result": "Error: 'parameters' is missing or empty."})),
                0.0,
                {},
            )
        result_text, metadata = await self._call_tool(instance_id, parameters)
        self._instance_dict.setdefault(instance_id, {"response": "", "reward": []})["reward"].append(
            result_text.strip()
        )
        metrics = {
            "query_count": metadata.get("query_count", 0),
            "status": metadata.get("status", "unknown"),
            "total_results": metadata.get("total_results", 0),
            "api_request_error": metadata.get("api_request_error"),
        }
        return ToolResponse(text=result_text), 0.0, metrics

    async def calc_reward(self, instance_id: str, **kwargs):
        return self._instance_dict[instance_id]["reward"]

    async def release(self, instance_id: str, **kwargs) -> None:
        self._instance_dict.pop(instance_id, None)

    def _parse_tool_result(self, content: list) -> tuple[str, dict]:
        tools_content = [part.text for part in filter(lambda x: x.type == "text", content)]
        return " ".join(tools_content), {}


class MCPSearchTool(MCPBaseTool):
    """verl's search-result parser: the `results` lists of the text parts, and their counts."""

    def _parse_tool_result(self, content: list) -> tuple[str, dict]:
        res, res_cnt, query_list = "", 0, []
        for part in content:
            if part.type != "text":
                continue
            text = part.text.replace("'", '"')
            query_match = re.search(r'query"\s*:\s*"([^"]+)"', text)
            query_list.append(query_match.group(1) if query_match else "")
            res_cnt += len(re.findall(r'"title"\s*:', text))
            results_match = re.search(r'"results"\s*:\s*(\[.*?\])', text, re.DOTALL)
            res += results_match.group(1) if results_match else ""
        metadata = {
            "api_request_error": "",
            "status": "success",
            "total_results": res_cnt,
            "queries": query_list,
            "query_count": len(query_list),
        }
        return res, metadata


def _positive(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"config.{name}={value!r} must be a number > 0")
    return float(value)
