"""Tool config YAMLs in verl's format: verl's shipped files build verl_lite's equivalents, a user's
class is imported by dotted path, and every bad file is one line naming the file, entry and problem."""

import pytest

from tests.helpers.agent import (
    VERL_GSM8K_TOOL_CONFIG,
    VERL_SANDBOX_TOOL_CONFIG,
    tool_entry,
    user_tool,
    write_yaml,
)
from tests.helpers.sandbox_server import SandboxServer
from verl_lite.tools.gsm8k import Gsm8kTool
from verl_lite.tools.registry import build_tools, check_tool_config, tool_schemas
from verl_lite.tools.sandbox_fusion import SandboxFusionTool


def test_verls_shipped_configs_build_the_equivalents(tmp_path):
    gsm8k = build_tools(write_yaml(tmp_path / "gsm8k.yaml", VERL_GSM8K_TOOL_CONFIG))
    assert list(gsm8k) == ["calc_gsm8k_reward"] and isinstance(gsm8k["calc_gsm8k_reward"], Gsm8kTool)
    with SandboxServer() as server:  # verl's file, its placeholder URL pointed at a local sandbox
        text = VERL_SANDBOX_TOOL_CONFIG.replace(
            "https://xxx.apigateway-cn-beijing.volceapi.com/run_code", server.url
        )
        sandbox = build_tools(write_yaml(tmp_path / "sandbox.yaml", text))
    tool = sandbox["code_interpreter"]
    assert isinstance(tool, SandboxFusionTool) and tool.timeout_s == 30 and tool.memory_mb == 1024
    assert tool.url == server.url


def test_schemas_go_to_the_chat_template_as_written(tmp_path):
    (schema,) = tool_schemas(write_yaml(tmp_path / "gsm8k.yaml", VERL_GSM8K_TOOL_CONFIG))
    assert schema["function"]["name"] == "calc_gsm8k_reward"
    assert schema["function"]["parameters"]["required"] == ["answer"]
    assert tool_schemas(None) is None


def test_a_users_class_by_dotted_path(tmp_path):
    path = write_yaml(
        tmp_path / "t.yaml", {"tools": [tool_entry(user_tool("EchoTool"), "echo", {"text": "t"})]}
    )
    tools = build_tools(path)
    assert type(tools["echo"]).__name__ == "EchoTool" and tools["echo"].name == "echo"


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("tools: [", "is not valid YAML"),
        ({"tool": []}, "must hold a non-empty list `tools:`"),
        ({"tools": []}, "must hold a non-empty list `tools:`"),
        ({"tools": ["x"]}, "tools[0] must be a mapping"),
        (
            {"tools": [{**tool_entry(user_tool("EchoTool"), "e"), "kwargs": 1}]},
            "tools[0] has unknown keys ['kwargs']",
        ),
        (
            {"tools": [{"class_name": user_tool("EchoTool"), "config": {"type": "native"}}]},
            "tools[0] has no tool_schema",
        ),
        (
            {"tools": [tool_entry("verl.tools.search_tool.SearchTool", "search")]},
            "class_name verl.tools.search_tool.SearchTool is not supported by verl_lite: it queries",
        ),
        (
            {"tools": [tool_entry("verl.tools.geo3k_tool.Geo3kTool", "geo")]},
            "Geo3kTool is not supported by verl_lite: vision-language",
        ),
        (
            {"tools": [tool_entry("verl.tools.new_tool.NewTool", "new")]},
            "NewTool is not supported by verl_lite: verl's class has no equivalent",
        ),
        (
            {"tools": [tool_entry(user_tool("EchoTool"), "e", type="mcp")]},
            "config.type=mcp needs an `mcp:` block with mcp_servers_config_path",
        ),
        (
            {"tools": [tool_entry(user_tool("EchoTool"), "e", type="remote")]},
            "config.type='remote' must be native or mcp",
        ),
        (
            {"tools": [tool_entry("no_such_pkg.tools.Tool", "e")]},
            "module 'no_such_pkg.tools' cannot be imported",
        ),
        ({"tools": [tool_entry("tests.tools.user_tools.Missing", "e")]}, "has no class 'Missing'"),
        ({"tools": [tool_entry("NoDots", "e")]}, "is not a dotted class path"),
        ({"tools": [tool_entry(user_tool("NoExecuteTool"), "e")]}, "has no methods ['execute']"),
        (
            {"tools": [tool_entry(user_tool("BrokenInitTool"), "e")]},
            "building the tool raised RuntimeError: cannot reach",
        ),
        (
            {"tools": [tool_entry(user_tool("EchoTool"), "e"), tool_entry(user_tool("EchoTool"), "e")]},
            "tool names ['e'] appear more than once",
        ),
        (
            {"tools": [tool_entry("verl.tools.gsm8k_tool.Gsm8kTool", "g", extra=1)]},
            "the GSM8K tool does not read",
        ),
        (
            {
                "tools": [
                    tool_entry(
                        "verl.tools.sandbox_fusion_tools.SandboxFusionTool",
                        "c",
                        default_language="java",
                        run_code_locally=True,
                    )
                ]
            },
            "runs python only",
        ),
        (
            {
                "tools": [
                    tool_entry("verl.tools.sandbox_fusion_tools.SandboxFusionTool", "c", memory_limit_mb=0)
                ]
            },
            "memory_limit_mb=0 must be a number > 0",
        ),
    ],
)
def test_each_bad_config_is_one_line(tmp_path, content, fragment):
    path = write_yaml(tmp_path / "tools.yaml", content)
    (problem,) = check_tool_config(path)
    assert fragment in problem and "\n" not in problem
    assert problem.startswith(path) or "tool_config_path" in problem


def test_a_missing_file_names_the_key(tmp_path):
    (problem,) = check_tool_config(str(tmp_path / "nope.yaml"))
    assert (
        problem
        == f"actor_rollout_ref.rollout.multi_turn.tool_config_path={str(tmp_path / 'nope.yaml')!r} does not exist; point it at the YAML file"
    )
    assert check_tool_config(None) == []
