"""Tool, interaction and agent-loop config files for tests, written the way verl lays them out."""

from __future__ import annotations

from pathlib import Path

import yaml

# verl's examples/sglang_multiturn/config/tool_config/gsm8k_tool_config.yaml, as shipped (less a trailing space)
VERL_GSM8K_TOOL_CONFIG = """\
tools:
  - class_name: "verl.tools.gsm8k_tool.Gsm8kTool"
    config:
      type: native
    tool_schema:
      type: "function"
      function:
        name: "calc_gsm8k_reward"
        description: "A tool for calculating the reward of gsm8k. (1.0 if parsed answer is correct, 0.0 if parsed answer is incorrect or not correctly parsed)"
        parameters:
          type: "object"
          properties:
            answer:
              type: "string"
              description: "The model's answer to the GSM8K math problem, must be a digits"
          required: ["answer"]
"""
# verl's examples/sglang_multiturn/config/tool_config/sandbox_fusion_tool_config.yaml, as shipped
VERL_SANDBOX_TOOL_CONFIG = """\
tools:
  - class_name: "verl.tools.sandbox_fusion_tools.SandboxFusionTool"
    config:
      sandbox_fusion_url: "https://xxx.apigateway-cn-beijing.volceapi.com/run_code"
      num_workers: 10
      enable_global_rate_limit: true
      rate_limit: 10
      default_timeout: 30
      default_language: "python"
      memory_limit_mb: 1024
      type: native

    tool_schema:
      type: "function"
      function:
        name: "code_interpreter"
        description: "A tool for executing code."
        parameters:
          type: "object"
          properties:
            code:
              type: "string"
              description: "The code to execute."
          required: ["code"]
"""
# verl's examples/sglang_multiturn/config/interaction_config/gsm8k_interaction_config.yaml
VERL_GSM8K_INTERACTION_CONFIG = """\
interaction:
  - name: "gsm8k"
    class_name: "verl.interactions.gsm8k_interaction.Gsm8kInteraction"
    config: {}
"""


def schema(name: str, params: dict[str, str] | None = None) -> dict:
    """A function schema with string parameters `params` (name -> description), all required."""
    params = params or {}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {
                "type": "object",
                "properties": {p: {"type": "string", "description": d} for p, d in params.items()},
                "required": list(params),
            },
        },
    }


def tool_entry(class_name: str, name: str, params: dict[str, str] | None = None, **config) -> dict:
    return {
        "class_name": class_name,
        "config": {"type": "native", **config},
        "tool_schema": schema(name, params),
    }


def write_yaml(path: Path, content) -> str:
    path = Path(path)
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
    return str(path)


def user_tool(cls: str) -> str:
    return f"tests.tools.user_tools.{cls}"
