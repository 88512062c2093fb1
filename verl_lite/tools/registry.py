"""Tools from a verl tool config YAML (`multi_turn.tool_config_path`), as verl lays it out:

    tools:
      - class_name: verl.tools.gsm8k_tool.Gsm8kTool     # dotted path of the tool class
        config: {type: native, ...}                     # handed to the class; type: native (mcp: refused)
        tool_schema: {type: function, function: {...}}  # tools/schema.py

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
}
VERL_REFUSED = {
    "verl.tools.search_tool.SearchTool": "it queries a search_r1 retrieval server; write a tool class for your retriever",
    "verl.tools.mcp_search_tool.MCPSearchTool": "MCP tools are not available",
    "verl.tools.mcp_base_tool.MCPBaseTool": "MCP tools are not available",
    "verl.tools.geo3k_tool.Geo3kTool": "vision-language tasks are not supported",
    "verl.tools.image_zoom_in_tool.ImageZoomInTool": "image tools need a vision-language model, which is not supported",
}
ENTRY_KEYS = ("class_name", "config", "tool_schema")


@dataclass(frozen=True)
class ToolEntry:
    class_name: str  # as written in the file
    cls: type
    config: dict
    schema: ToolSchema


def _entry(item, where: str) -> ToolEntry:
    class_name, config = read_entry(item, where, ENTRY_KEYS)
    kind = config.get("type", "native")
    if kind == "mcp":
        raise ValueError(
            f"{where}.config.type=mcp is not supported by verl_lite: MCP tools are not available"
        )
    if kind != "native":
        raise ValueError(f"{where}.config.type={kind!r} must be native")
    if item.get("tool_schema") is None:
        raise ValueError(
            f"{where} has no tool_schema; give the tool's function schema (name, description, parameters)"
        )
    schema = ToolSchema.from_dict(item["tool_schema"], f"{where}.tool_schema")
    try:
        cls = resolve_extension_class(
            class_name, BaseTool, TOOL_METHODS, VERL_EQUIVALENTS, VERL_REFUSED, plain_ok=True
        )
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    return ToolEntry(class_name, cls, config, schema)


def read_tool_config(path: str, key: str = KEY) -> list[ToolEntry]:
    """Every entry of the file, checked; ValueError on the first problem."""
    content = load_yaml(path, key)
    tools = content.get("tools") if isinstance(content, dict) else None
    if not isinstance(tools, list) or not tools:
        raise ValueError(f"{key}={path!r} must hold a non-empty list `tools:` (verl's tool config format)")
    entries = [_entry(item, f"{path}: tools[{i}]") for i, item in enumerate(tools)]
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
