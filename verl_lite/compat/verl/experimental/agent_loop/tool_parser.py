"""verl.experimental.agent_loop.tool_parser: ToolParser (its registry), FunctionCall and the
built-in parsers (agent_loop/tool_parser.py, agent_loop/parsers/)."""

from verl_lite.agent_loop.parsers.glm import GlmToolParser as GLMToolParser
from verl_lite.agent_loop.parsers.gpt_oss import GptOssToolParser
from verl_lite.agent_loop.parsers.hermes import HermesToolParser
from verl_lite.agent_loop.parsers.qwen3_coder import Qwen3CoderToolParser as Qwen3XMLToolParser
from verl_lite.agent_loop.tool_parser import FunctionCall, ToolParser

__all__ = [
    "FunctionCall",
    "GLMToolParser",
    "GptOssToolParser",
    "HermesToolParser",
    "Qwen3XMLToolParser",
    "ToolParser",
]
