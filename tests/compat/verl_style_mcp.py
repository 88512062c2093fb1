"""An MCP tool a verl user writes, importing verl's MCPBaseTool from verl's path (run here without
verl installed). Its own file: importing verl_style.py registers an agent loop, which other tests
expect to happen in their own order."""

from verl.tools.mcp_base_tool import MCPBaseTool


class LabelledMCPTool(MCPBaseTool):
    """verl's documented way to read an MCP server's results differently: override _parse_tool_result."""

    def _parse_tool_result(self, content: list) -> tuple[str, dict]:
        return "result: " + "|".join(part.text for part in content if part.type == "text"), {"status": "ok"}
