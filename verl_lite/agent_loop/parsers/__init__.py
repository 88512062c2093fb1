"""The built-in tool-call formats, one file each; importing this package registers them all."""

from verl_lite.agent_loop.parsers import glm, gpt_oss, hermes, qwen3_coder

__all__ = ["glm", "gpt_oss", "hermes", "qwen3_coder"]
