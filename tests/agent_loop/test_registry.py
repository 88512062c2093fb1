"""Agent loops by name: the built-ins, and a user's from agent_loop_config_path (verl's format)."""

import pytest

from tests.helpers.agent import write_yaml
from verl_lite.agent_loop.registry import agent_loops, check_agent_loops
from verl_lite.agent_loop.single_turn import SingleTurnAgentLoop
from verl_lite.agent_loop.tool_agent import ToolAgentLoop


def test_built_in_loops():
    loops = agent_loops(None)
    assert loops["single_turn_agent"].load() is SingleTurnAgentLoop
    assert loops["tool_agent"].load() is ToolAgentLoop


def test_user_loops_extend_and_may_replace(tmp_path):
    path = write_yaml(
        tmp_path / "loops.yaml",
        [
            {"name": "echo", "_target_": "tests.agent_loop.user_loops.EchoLoop", "suffix": "!"},
            {"name": "tool_agent", "_target_": "verl.experimental.agent_loop.tool_agent_loop.ToolAgentLoop"},
        ],
    )
    loops = agent_loops(path)
    assert loops["echo"].load().__name__ == "EchoLoop" and loops["echo"].kwargs == {"suffix": "!"}
    assert loops["tool_agent"].load() is ToolAgentLoop and "single_turn_agent" in loops
    assert check_agent_loops(path) == []


@pytest.mark.parametrize(
    "content, fragment",
    [
        ({"name": "x"}, "must hold a non-empty YAML list"),
        ([{"name": "x"}], "entry 0 must be a mapping with a string `name` and `_target_`"),
        (
            [{"name": "x", "_target_": "tests.agent_loop.user_loops.NotALoop"}],
            "is not a subclass of verl_lite.agent_loop.base.AgentLoopBase",
        ),
        (
            [{"name": "x", "_target_": "verl.experimental.agent_loop.react.ReactAgentLoop"}],
            "is not supported by verl_lite",
        ),
        ([{"name": "x", "_target_": "nowhere.Loop"}], "module 'nowhere' cannot be imported"),
        (
            [{"name": "x", "_target_": "tests.agent_loop.user_loops.CallToolOverride"}],
            "tests.agent_loop.user_loops.CallToolOverride overrides verl's ToolAgentLoop method(s) ['_call_tool'], "
            "which verl_lite never calls; verl_lite's ToolAgentLoop is one run() without verl's state-machine hooks",
        ),
        (
            [{"name": "x", "_target_": "tests.agent_loop.user_loops.OwnRunCallingVerlHooks"}],
            "run() calls verl's ToolAgentLoop method(s) ['_handle_pending_state'], which verl_lite's",
        ),
    ],
)
def test_bad_loop_configs(tmp_path, content, fragment):
    (problem,) = check_agent_loops(write_yaml(tmp_path / "loops.yaml", content))
    assert fragment in problem and "\n" not in problem


def test_a_tool_agent_subclass_setting_verls_attributes_is_accepted(tmp_path):
    path = write_yaml(
        tmp_path / "loops.yaml", [{"name": "x", "_target_": "tests.agent_loop.user_loops.FewerParallelCalls"}]
    )
    assert check_agent_loops(path) == []
