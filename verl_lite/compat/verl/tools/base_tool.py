"""verl.tools.base_tool: verl_lite's BaseTool, verl's contract (tools/base.py)."""

from verl_lite.tools.base import BaseTool
from verl_lite.tools.schema import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["BaseTool", "OpenAIFunctionToolSchema", "ToolResponse"]
