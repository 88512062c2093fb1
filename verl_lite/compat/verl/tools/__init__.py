"""verl.tools: base_tool and schemas (verl's tool contract, tools/base.py and tools/schema.py), and the
MCP tools verl shipped before 0.9 (mcp_base_tool, mcp_search_tool: tools/mcp_tool.py)."""
