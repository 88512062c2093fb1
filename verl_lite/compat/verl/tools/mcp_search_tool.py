"""verl.tools.mcp_search_tool: verl's MCPSearchTool (tools/mcp_tool.py)."""

from verl_lite.tools.mcp_tool import MCPBaseTool, MCPSearchTool

__all__ = ["MCPBaseTool", "MCPSearchTool"]
