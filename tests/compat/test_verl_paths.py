"""A user's reward, tool, interaction and agent-loop file written for verl (imports from `verl.*`)
runs here unchanged without verl installed; an installed verl is never shadowed."""

import asyncio
import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.agent import tool_entry, write_yaml
from verl_lite.agent_loop.registry import agent_loops
from verl_lite.agent_loop.tool_calls import ToolRunner
from verl_lite.agent_loop.tool_parser import ToolCall
from verl_lite.interactions.registry import build_interactions
from verl_lite.reward.scorers import load_custom_scorer
from verl_lite.tools.base import BaseTool
from verl_lite.tools.registry import build_tools, check_tool_config
from verl_lite.utils.verl_paths import verl_installed

STYLE = "tests.compat.verl_style"
HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))

pytestmark = pytest.mark.skipif(verl_installed(), reason="verl is installed: its own modules answer")


def test_a_reward_file_importing_verls_scorers_scores():
    score = load_custom_scorer(os.path.join(HERE, "verl_style.py"), "compute_score")
    assert score("openai/gsm8k", "<tool_call>..</tool_call> #### 72", "72") == pytest.approx(1.1)
    assert score("openai/gsm8k", "#### 71", "72") == 0.0


def test_verls_paths_are_verl_lites_classes():
    from verl.tools.base_tool import BaseTool as VerlBaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema

    from verl_lite.tools.schema import ToolSchema

    assert VerlBaseTool is BaseTool and issubclass(ToolSchema, OpenAIFunctionToolSchema)


def test_a_tool_in_verls_style_builds_and_its_semaphore_holds_16_concurrent_calls(tmp_path):
    entry = tool_entry(
        f"{STYLE}.RateLimitedTool", "calc_gsm8k_reward", {"answer": "the answer"}, max_concurrency=4
    )
    path = write_yaml(tmp_path / "tools.yaml", {"tools": [entry]})
    assert check_tool_config(path) == []
    tools = build_tools(path)
    tool = tools["calc_gsm8k_reward"]
    assert '"name": "calc_gsm8k_reward"' in tool.rendered and "strict" not in tool.rendered
    runner = ToolRunner(tools, timeout_s=10.0, max_response_length=256, truncate_side="middle")

    async def calls():
        return await asyncio.gather(
            *(
                runner.session({}).run_turn([ToolCall("calc_gsm8k_reward", {"answer": str(i)})], 1)
                for i in range(16)
            )
        )

    assert asyncio.run(calls()) == [[f"calc_gsm8k_reward: {i}"] for i in range(16)]
    assert tool.most_inside == 4


def test_an_interaction_subclassing_verls_base_builds(tmp_path):
    path = write_yaml(tmp_path / "i.yaml", {"interaction": [{"class_name": f"{STYLE}.EchoInteraction"}]})
    interaction = build_interactions(path)["echo"]
    done, text, score, _ = asyncio.run(
        interaction.generate_response("i", [{"role": "assistant", "content": "7"}])
    )
    assert (done, text, score) == (True, "you said 7", 1.0)


def test_an_agent_loop_from_verls_package_registers_and_loads(tmp_path):
    path = write_yaml(tmp_path / "loops.yaml", [{"name": "mine", "_target_": f"{STYLE}.OneTurnLoop"}])
    loops = agent_loops(path)
    assert loops["mine"].load().__name__ == "OneTurnLoop"
    assert loops["verl_style_agent"].load() is loops["mine"].load()  # by @register, once imported


def test_a_verl_module_verl_lite_lacks_says_so_not_pythonpath(tmp_path):
    reward = tmp_path / "reward.py"
    reward.write_text("from verl.utils.reward_score import prime_math\n")
    with pytest.raises(ValueError) as info:
        load_custom_scorer(str(reward), "compute_score")
    message = str(info.value)
    assert (
        "verl is not installed and verl_lite does not provide 'verl.utils.reward_score.prime_math'" in message
    )
    assert "verl.utils.reward_score.gsm8k" in message and "PYTHONPATH" not in message
    path = write_yaml(tmp_path / "t.yaml", {"tools": [tool_entry("verl.tools.web_tool.WebTool", "web")]})
    (problem,) = check_tool_config(path)
    assert (
        "class_name verl.tools.web_tool.WebTool is not supported by verl_lite: verl's class has no" in problem
    )


def test_an_installed_verl_is_used_as_it_is(tmp_path):
    """A verl on the path (here a stand-in package) answers verl's imports, not verl_lite."""
    (tmp_path / "verl" / "tools").mkdir(parents=True)
    (tmp_path / "verl" / "__init__.py").write_text("")
    (tmp_path / "verl" / "tools" / "__init__.py").write_text("")
    (tmp_path / "verl" / "tools" / "base_tool.py").write_text("class BaseTool:\n    REAL = True\n")
    code = textwrap.dedent(
        """
        import verl_lite
        from verl_lite.utils.verl_paths import verl_installed
        from verl.tools.base_tool import BaseTool
        assert verl_installed() and BaseTool.REAL, BaseTool
        try:
            import verl.utils.reward_score
        except ModuleNotFoundError:
            print("ok")
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), ROOT])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


def test_verls_get_event_loop_imports_as_its_tool_parser_imports_it():
    """verl 0.9.0's tool_parser.py and agent_loop.py: `from verl.utils.ray_utils import get_event_loop`."""
    from verl.utils.ray_utils import get_event_loop

    assert isinstance(get_event_loop(), asyncio.AbstractEventLoop)
