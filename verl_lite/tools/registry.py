"""Tools from a verl tool config YAML (`multi_turn.tool_config_path`), as verl lays it out:

    tools:
      - class_name: verl.tools.gsm8k_tool.Gsm8kTool     # dotted path of the tool class
        config: {type: native, ...}                     # handed to the class
        tool_schema: {type: function, function: {...}}  # tools/schema.py
      - class_name: verl.tools.mcp_base_tool.MCPBaseTool  # or MCPSearchTool, or a subclass of either
        config: {type: mcp, timeout: 30, rate_limit: 10}
        mcp: {mcp_servers_config_path: servers.json, tool_selected_list: [name, ...]}  # list optional

A `type: mcp` entry is one tool per tool its MCP servers list (tools/mcp_servers.py), with the
server's name, description and JSON schema, kept to `tool_selected_list` when given (every name in it
must be listed by a server, or the file is refused); its class (MCPBaseTool when class_name is empty,
as verl's docs write it) is built once per tool (tools/mcp_tool.py).

A user's class is imported by its dotted path and must follow verl's tool contract (tools/base.py:
async create, execute, calc_reward, release; a plain `def` method is run in a thread, for blocking code). verl's own shipped classes are not importable here
(verl is not installed) and resolve by name: to verl_lite's equivalent where one exists
(VERL_EQUIVALENTS), else to a one-line refusal naming the class. `read_tool_config` checks the
whole file (every problem a ValueError naming the file, the entry and the field) and `build_tools`
makes the tools, one instance per name, shared by every trajectory of a worker. A constructor runs
under a deadline (multi_turn.tool_call_timeout, as every other call into a tool) and may not end the
process (sys.exit): either is one line naming the entry and its class (utils/user_code.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_lite.tools.base import TOOL_METHODS, BaseTool
from verl_lite.tools.schema import ToolSchema
from verl_lite.utils.class_path import load_yaml, read_entry, resolve_extension_class
from verl_lite.utils.user_code import UserCodeExit, UserCodeTimeout, call_with_deadline, file_of

TIMEOUT_KEY = "actor_rollout_ref.rollout.multi_turn.tool_call_timeout"

KEY = "actor_rollout_ref.rollout.multi_turn.tool_config_path"
VERL_EQUIVALENTS = {
    "verl.tools.gsm8k_tool.Gsm8kTool": "verl_lite.tools.gsm8k:Gsm8kTool",
    "verl.tools.sandbox_fusion_tools.SandboxFusionTool": "verl_lite.tools.sandbox_fusion:SandboxFusionTool",
    "verl.tools.mcp_base_tool.MCPBaseTool": "verl_lite.tools.mcp_tool:MCPBaseTool",
    "verl.tools.mcp_search_tool.MCPSearchTool": "verl_lite.tools.mcp_tool:MCPSearchTool",
}
VERL_REFUSED = {
    "verl.tools.search_tool.SearchTool": "it queries a search_r1 retrieval server; write a tool class for your retriever",
    "verl.tools.geo3k_tool.Geo3kTool": "vision-language tasks are not supported",
    "verl.tools.image_zoom_in_tool.ImageZoomInTool": "image tools need a vision-language model, which is not supported",
}
ENTRY_KEYS = ("class_name", "config", "tool_schema", "mcp")
MCP_KEYS = ("mcp_servers_config_path", "tool_selected_list")


@dataclass(frozen=True)
class ToolEntry:
    class_name: str  # as written in the file
    cls: type
    config: dict
    schema: ToolSchema


def _entries(item, where: str) -> list[ToolEntry]:
    class_name, config = read_entry(item, where, ENTRY_KEYS)
    kind = config.get("type", "native")
    if kind == "mcp":
        return _mcp_entries(item, class_name, config, where)
    if kind != "native":
        raise ValueError(f"{where}.config.type={kind!r} must be native or mcp")
    if item.get("mcp") is not None:
        raise ValueError(f"{where} has an `mcp:` block but config.type={kind!r}; set config.type: mcp")
    if item.get("tool_schema") is None:
        raise ValueError(
            f"{where} has no tool_schema; give the tool's function schema (name, description, parameters)"
        )
    schema = ToolSchema.from_dict(item["tool_schema"], f"{where}.tool_schema")
    return [ToolEntry(class_name, _class(class_name, where), config, schema)]


def _class(class_name: str, where: str) -> type:
    try:
        return resolve_extension_class(
            class_name, BaseTool, TOOL_METHODS, VERL_EQUIVALENTS, VERL_REFUSED, plain_ok=True
        )
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def _mcp_entries(item: dict, class_name: str, config: dict, where: str) -> list[ToolEntry]:
    """One entry per tool the servers list (kept to tool_selected_list), schema from the server."""
    from verl_lite.tools import mcp_servers

    block = item.get("mcp")
    if not isinstance(block, dict):
        raise ValueError(
            f"{where}: config.type=mcp needs an `mcp:` block with mcp_servers_config_path (verl's MCP tool config)"
        )
    unknown = sorted(set(block) - set(MCP_KEYS))
    if unknown:
        raise ValueError(f"{where}.mcp has unknown keys {unknown}; it has {list(MCP_KEYS)}")
    if item.get("tool_schema") is not None:
        raise ValueError(
            f"{where}: an MCP entry takes its tools' schemas from the server; remove tool_schema"
        )
    selected = block.get("tool_selected_list") or None  # verl: absent or empty means every tool
    if selected is not None and (
        not isinstance(selected, list) or not all(isinstance(n, str) for n in selected)
    ):
        raise ValueError(f"{where}.mcp.tool_selected_list must be a list of tool names, got {selected!r}")
    cls = _class(class_name or "verl.tools.mcp_base_tool.MCPBaseTool", where)
    servers = mcp_servers.servers_for(block.get("mcp_servers_config_path"), where)
    listed = servers.list_tools(where)
    names = [t.name for t in listed]
    missing = [n for n in selected or () if n not in names]
    if missing:
        raise ValueError(
            f"{where}.mcp.tool_selected_list names {missing}, which no server of "
            f"{servers.path} lists; its servers list {names}"
        )
    entries = []
    for tool in listed:
        if selected is not None and tool.name not in selected:
            continue
        schema_dict = _mcp2openai(tool)
        schema = ToolSchema.from_dict(schema_dict, f"{where} (the schema MCP server lists for {tool.name!r})")
        entries.append(ToolEntry(class_name or "MCPBaseTool", cls, config, schema))
    if not entries:
        raise ValueError(f"{where}: the MCP servers of {servers.path} list no tools")
    return entries


def _mcp2openai(tool) -> dict:
    """verl's mcp2openai: the server's tool as an OpenAI function schema (`required` [] when absent)."""
    parameters = dict(tool.input_schema or {"type": "object", "properties": {}})
    if not parameters.get("required"):
        parameters["required"] = []
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description or "",
            "parameters": parameters,
            "strict": False,
        },
    }


def read_tool_config(path: str, key: str = KEY) -> list[ToolEntry]:
    """Every entry of the file, checked; ValueError on the first problem."""
    content = load_yaml(path, key)
    tools = content.get("tools") if isinstance(content, dict) else None
    if not isinstance(tools, list) or not tools:
        raise ValueError(f"{key}={path!r} must hold a non-empty list `tools:` (verl's tool config format)")
    entries = [e for i, item in enumerate(tools) for e in _entries(item, f"{path}: tools[{i}]")]
    names = [e.schema.name for e in entries]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"{path}: tool names {twice} appear more than once; each tool needs its own name")
    return entries


def build_tools(path: str, key: str = KEY, timeout_s: float | None = None) -> dict:
    """name -> tool instance, for every entry of the file; each constructor waited for at most
    `timeout_s` seconds (None: no deadline)."""
    tools = {}
    for i, entry in enumerate(read_tool_config(path, key)):
        what = f"{path}: tools[{i}] {entry.class_name} ({file_of(entry.cls)})"

        def build(entry=entry):
            return entry.cls(config=dict(entry.config), tool_schema=entry.schema)

        try:
            tools[entry.schema.name] = call_with_deadline(build, timeout_s, f"{what}.__init__", TIMEOUT_KEY)
        except (UserCodeExit, UserCodeTimeout):
            raise
        except Exception as e:
            raise ValueError(
                f"{path}: tools[{i}] ({entry.class_name}): building the tool raised {type(e).__name__}: {e}"
            ) from e
    return tools


def tool_schemas(path: str | None, key: str = KEY) -> list[dict] | None:
    """The schemas the chat template renders (`tools=`), or None without a file."""
    if not path:
        return None
    return [entry.schema.as_dict() for entry in read_tool_config(path, key)]


def check_tool_config(path: str | None, key: str = KEY, timeout_s: float | None = None) -> list[str]:
    """Start-up: the file reads, every class resolves and every tool builds; one line per problem."""
    if not path:
        return []
    try:
        build_tools(path, key, timeout_s)
    except ValueError as e:
        return [str(e)]
    return []
