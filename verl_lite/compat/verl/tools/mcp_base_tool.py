"""verl.tools.mcp_base_tool: verl's MCPBaseTool (tools/mcp_tool.py), for a user's subclass."""

from verl_lite.tools.base import BaseTool
from verl_lite.tools.mcp_tool import MCPBaseTool
from verl_lite.tools.schema import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["BaseTool", "MCPBaseTool", "OpenAIFunctionToolSchema", "ToolResponse"]
