"""Tools a policy calls during a multi-turn rollout, in verl's tool contract and YAML format.

schema.py            verl's OpenAI function schema of a tool, validated field by field
base.py              the contract: async create / execute / calc_reward / release, ToolResponse
registry.py          a tool config YAML (`tools: - class_name, config, tool_schema`) -> tools;
                     verl's shipped class names mapped to verl_lite's equivalents or refused
gsm8k.py             the GSM8K answer tool (`calc_gsm8k_reward`)
sandbox_fusion.py    verl's SandboxFusionTool: code sent to the SandboxFusion service (sandbox_api.py
                     speaks its HTTP API), or with `run_code_locally: true` run here in a limited
                     child process (local_sandbox.py; sandbox_child.py is the program it runs)
mcp_tool.py          verl's MCPBaseTool / MCPSearchTool (`config.type: mcp`): tools an MCP server lists
mcp_servers.py       verl's MCP servers JSON, and the sessions to them (the `mcp` client library)
"""
