"""Bad multi-turn input through the real CLI entry (in-process, as tests/test_bad_input.py does it):
exit 2, one line naming the key, file or row and the fix, before Ray. And the good multi-turn input
passes every start-up check (so each case fails for its own damage only)."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from tests.helpers.agent import (
    VERL_GSM8K_INTERACTION_CONFIG,
    VERL_GSM8K_TOOL_CONFIG,
    VERL_SANDBOX_TOOL_CONFIG,
    tool_entry,
    user_tool,
    write_yaml,
)
from tests.helpers.sandbox_server import closed_url
from tests.test_bad_input import BASE, run_in_process
from verl_lite import main_ppo

MT = "actor_rollout_ref.rollout.multi_turn"
AGENT = "actor_rollout_ref.rollout.agent"
TRACE = "actor_rollout_ref.rollout.trace"


def rows(n=8, **changes) -> list[dict]:
    """Tool-agent rows (verl's layout) over short arithmetic prompts; `changes` edits every row."""
    out = []
    for i in range(n):
        row = {
            "data_source": "verl_lite/arith",
            "agent_name": "tool_agent",
            "prompt": [{"role": "user", "content": f"{i}+1="}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
            "extra_info": {
                "index": i,
                "need_tools_kwargs": True,
                "tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": str(i + 1)}}},
                "interaction_kwargs": {"name": "gsm8k", "ground_truth": str(i + 1)},
            },
        }
        for key, value in changes.items():
            if key.startswith("extra_info."):
                row["extra_info"][key.split(".", 1)[1]] = value
            else:
                row[key] = value
        out.append(row)
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("multi_turn_bad")
    data = {
        "good": rows(),
        "no_agent_name": [{k: v for k, v in r.items() if k != "agent_name"} for r in rows()],
        "some_agent_name": rows(5) + [{k: v for k, v in r.items() if k != "agent_name"} for r in rows(3)],
        "unknown_agent": rows(agent_name="react_agent"),
        "unknown_tool": rows(**{"extra_info.tools_kwargs": {"calculator": {"create_kwargs": {"x": "1"}}}}),
        "no_tools_kwargs": rows(**{"extra_info.tools_kwargs": None}),
        "no_interaction_name": rows(**{"extra_info.interaction_kwargs": {"ground_truth": "1"}}),
        # tools_kwargs / interaction_kwargs / extra_info of the wrong shape (issue 38, class 4)
        "tool_entry_str": rows(**{"extra_info.tools_kwargs": {"calc_gsm8k_reward": "7"}}),
        "create_kwargs_str": rows(
            **{"extra_info.tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": "7"}}}
        ),
        "create_kwarg_typo": rows(
            **{"extra_info.tools_kwargs": {"calc_gsm8k_reward": {"create_kwarg": {"ground_truth": "1"}}}}
        ),
        "interaction_kwargs_str": rows(**{"extra_info.interaction_kwargs": "gsm8k"}),
        "extra_info_str": rows(extra_info="index 3"),
    }
    paths = {}
    for name, content in data.items():
        paths[name] = str(root / f"{name}.parquet")
        pd.DataFrame(content).to_parquet(paths[name])
    paths["tools"] = write_yaml(root / "tools.yaml", VERL_GSM8K_TOOL_CONFIG)
    paths["interaction"] = write_yaml(root / "interaction.yaml", VERL_GSM8K_INTERACTION_CONFIG)
    paths["bad_yaml"] = write_yaml(root / "bad.yaml", "tools: [")
    for name, entry in {
        "not_importable": tool_entry("my_tools.calc.Calculator", "calc"),
        "bad_schema": {
            **tool_entry(user_tool("EchoTool"), "echo"),
            "tool_schema": {"type": "function", "function": {"name": "echo"}},
        },
        "verl_search": tool_entry("verl.tools.search_tool.SearchTool", "search"),
    }.items():
        paths[name] = write_yaml(root / f"{name}.yaml", {"tools": [entry]})
    paths["loops"] = write_yaml(root / "loops.yaml", [{"name": "mine", "_target_": "my_agents.Loop"}])
    paths |= user_code_files(root) | {"root": str(root)}
    sys.path.insert(0, str(root / "user_code"))
    yield paths
    sys.path.remove(str(root / "user_code"))


# a user's modules: ones that exit when imported, classes that exit or block when built
USER_CODE = {
    "exits_at_import_mt38.py": "import sys\nsys.exit(0)\n",
    "user_classes_mt38.py": """\
import sys
import time

from verl_lite.interactions.base import BaseInteraction
from verl_lite.tools.base import BaseTool


class ExitingTool(BaseTool):
    def __init__(self, config, tool_schema):
        sys.exit(0)


class BlockingTool(BaseTool):
    def __init__(self, config, tool_schema):
        time.sleep(30)


class ExitingInteraction(BaseInteraction):
    def __init__(self, config):
        raise SystemExit(5)


class BlockingInteraction(BaseInteraction):
    def __init__(self, config):
        time.sleep(30)
""",
}


def user_code_files(root) -> dict[str, str]:
    (root / "user_code").mkdir()
    for name, text in USER_CODE.items():
        (root / "user_code" / name).write_text(text)
    paths = {}
    for tag, cls in {
        "tool_exits_at_import": "exits_at_import_mt38.Tool",
        "tool_exits_when_built": "user_classes_mt38.ExitingTool",
        "tool_blocks_when_built": "user_classes_mt38.BlockingTool",
    }.items():
        paths[tag] = write_yaml(root / f"{tag}.yaml", {"tools": [tool_entry(cls, "calc_gsm8k_reward")]})
    for tag, cls in {
        "interaction_exits_at_import": "exits_at_import_mt38.User",
        "interaction_exits_when_built": "user_classes_mt38.ExitingInteraction",
        "interaction_blocks_when_built": "user_classes_mt38.BlockingInteraction",
    }.items():
        paths[tag] = write_yaml(root / f"{tag}.yaml", {"interaction": [{"name": "gsm8k", "class_name": cls}]})
    paths["loop_not_async"] = write_yaml(
        root / "loop_sync.yaml", [{"name": "sync", "_target_": "tests.agent_loop.user_loops.SyncRunLoop"}]
    )
    paths["loop_old_constructor"] = write_yaml(
        root / "loop_old.yaml",
        [{"name": "old", "_target_": "tests.agent_loop.user_loops.OldConstructorLoop"}],
    )
    paths["loop_exits_at_import"] = write_yaml(
        root / "loop_exits.yaml", [{"name": "mine", "_target_": "exits_at_import_mt38.Loop"}]
    )
    return paths


def multi_turn(f, data="good", tools="tools", val="good"):
    return [
        f"data.train_files={f[data]}",
        f"data.val_files={f[val]}",
        f"{MT}.enable=True",
        f"{MT}.tool_config_path={f[tools]}",
    ]


EXITS = "called sys.exit(0)"
CASES = [
    # --- a user's code that would end the process, or never return (issue 38, classes 1 and 2) ----
    (
        "tool_module_exits_at_import",
        lambda f: multi_turn(f, tools="tool_exits_at_import"),
        "exits_at_import_mt38.Tool: importing 'exits_at_import_mt38' ({r}/user_code/exits_at_import_mt38.py) "
        + EXITS,
    ),
    (
        "tool_exits_when_built",
        lambda f: multi_turn(f, tools="tool_exits_when_built"),
        "tools[0] user_classes_mt38.ExitingTool ({r}/user_code/user_classes_mt38.py).__init__ " + EXITS,
    ),
    (
        "tool_blocks_when_built",
        lambda f: multi_turn(f, tools="tool_blocks_when_built") + [f"{MT}.tool_call_timeout=0.2"],
        "tools[0] user_classes_mt38.BlockingTool ({r}/user_code/user_classes_mt38.py).__init__ did not return "
        f"within 0.2 s ({MT}.tool_call_timeout)",
    ),
    (
        "interaction_module_exits_at_import",
        lambda f: multi_turn(f) + [f"{MT}.interaction_config_path={f['interaction_exits_at_import']}"],
        "importing 'exits_at_import_mt38' ({r}/user_code/exits_at_import_mt38.py) " + EXITS,
    ),
    (
        "interaction_exits_when_built",
        lambda f: multi_turn(f) + [f"{MT}.interaction_config_path={f['interaction_exits_when_built']}"],
        "interaction[0]: user_classes_mt38.ExitingInteraction ({r}/user_code/user_classes_mt38.py).__init__ "
        "called sys.exit(5), which would end the run",
    ),
    (
        "interaction_blocks_when_built",
        lambda f: (
            multi_turn(f)
            + [
                f"{MT}.interaction_config_path={f['interaction_blocks_when_built']}",
                f"{MT}.tool_call_timeout=0.2",
            ]
        ),
        f".__init__ did not return within 0.2 s ({MT}.tool_call_timeout)",
    ),
    (
        "agent_loop_module_exits_at_import",
        lambda f: multi_turn(f) + [f"{AGENT}.agent_loop_config_path={f['loop_exits_at_import']}"],
        "exits_at_import_mt38.Loop: importing 'exits_at_import_mt38' ({r}/user_code/exits_at_import_mt38.py) "
        + EXITS,
    ),
    (
        "agent_loop_run_not_async",
        lambda f: multi_turn(f) + [f"{AGENT}.agent_loop_config_path={f['loop_not_async']}"],
        "agent loop 'sync': tests.agent_loop.user_loops.SyncRunLoop.run must be an async method",
    ),
    (
        "agent_loop_constructor_not_verls",
        lambda f: multi_turn(f) + [f"{AGENT}.agent_loop_config_path={f['loop_old_constructor']}"],
        "agent loop 'old': tests.agent_loop.user_loops.OldConstructorLoop.__init__ does not accept verl's "
        "constructor arguments (",
    ),
    (
        "loop_timeout_below_a_trajectorys_last_tool_calls",
        lambda f: multi_turn(f) + [f"{AGENT}.loop_timeout=299"],
        f"{AGENT}.loop_timeout=299 is less than (3 + 2 x 1 tools) x {MT}.tool_call_timeout=60 = 300 s, "
        "what a trajectory's tool calls after its last generation may take (create, execute, calc_reward and "
        "release per tool, finalize_interaction); raise loop_timeout to 300 or more",
    ),
    (
        "loop_timeout_zero",
        lambda f: multi_turn(f) + [f"{AGENT}.loop_timeout=0"],
        f"{AGENT}.loop_timeout=0.0 must be a finite number > 0",
    ),
    (
        "tools_kwargs_entry_not_a_mapping",
        lambda f: multi_turn(f, data="tool_entry_str"),
        "data.train_files: {r}/tool_entry_str.parquet row 0 (7 more rows like it): "
        "extra_info.tools_kwargs.calc_gsm8k_reward='7' must be a mapping with ['create_kwargs',",
    ),
    (
        "tools_kwargs_create_kwargs_not_a_mapping",
        lambda f: multi_turn(f, data="create_kwargs_str"),
        "row 0 (7 more rows like it): extra_info.tools_kwargs.calc_gsm8k_reward.create_kwargs='7' must be a "
        "mapping of keyword arguments",
    ),
    (
        "tools_kwargs_key_misspelled",
        lambda f: multi_turn(f, data="create_kwarg_typo"),
        "extra_info.tools_kwargs.calc_gsm8k_reward has keys ['create_kwarg'] that no tool call reads",
    ),
    (
        "interaction_kwargs_not_a_mapping",
        lambda f: multi_turn(f, data="interaction_kwargs_str"),
        "row 0 (7 more rows like it): extra_info.interaction_kwargs='gsm8k' must be a mapping",
    ),
    (
        "extra_info_not_a_mapping",
        lambda f: multi_turn(f, data="extra_info_str"),
        "{r}/extra_info_str.parquet row 0 (7 more rows like it): extra_info='index 3' must be a mapping",
    ),
    (
        "tool_config_missing",
        lambda f: multi_turn(f) + [f"{MT}.tool_config_path=/no/tools.yaml"],
        f"{MT}.tool_config_path='/no/tools.yaml' does not exist; point it at the YAML file",
    ),
    ("tool_config_invalid_yaml", lambda f: multi_turn(f, tools="bad_yaml"), "is not valid YAML"),
    (
        "tool_class_not_importable",
        lambda f: multi_turn(f, tools="not_importable"),
        "my_tools.calc.Calculator: module 'my_tools.calc' cannot be imported",
    ),
    (
        "tool_schema_invalid",
        lambda f: multi_turn(f, tools="bad_schema"),
        "tools[0].tool_schema.function.description must be a string",
    ),
    (
        "verl_tool_without_equivalent",
        lambda f: multi_turn(f, tools="verl_search"),
        "class_name verl.tools.search_tool.SearchTool is not supported by verl_lite",
    ),
    (
        "interaction_config_missing",
        lambda f: multi_turn(f) + [f"{MT}.interaction_config_path=/no/i.yaml"],
        f"{MT}.interaction_config_path='/no/i.yaml' does not exist",
    ),
    (
        "interaction_invalid_yaml",
        lambda f: multi_turn(f) + [f"{MT}.interaction_config_path={f['bad_yaml']}"],
        "is not valid YAML",
    ),
    (
        "enable_without_agent_name",
        lambda f: multi_turn(f, data="no_agent_name"),
        f"{MT}.enable=True with {MT}.tool_config_path set, but no row of data.train_files names an agent loop and "
        f"{AGENT}.default_agent_loop=single_turn_agent",
    ),
    (
        "val_without_agent_name",
        lambda f: multi_turn(f, val="no_agent_name"),
        "but no row of data.val_files names an agent loop",
    ),
    (
        "agent_name_unknown",
        lambda f: multi_turn(f, data="unknown_agent"),
        "row 0 (7 more rows like it): agent_name='react_agent' is not an agent loop",
    ),
    (
        "default_agent_loop_unknown",
        lambda f: multi_turn(f) + [f"{AGENT}.default_agent_loop=react"],
        f"{AGENT}.default_agent_loop='react' is not an agent loop",
    ),
    (
        "agent_loop_config_not_importable",
        lambda f: multi_turn(f) + [f"{AGENT}.agent_loop_config_path={f['loops']}"],
        "my_agents.Loop: module 'my_agents' cannot be imported",
    ),
    (
        "tools_kwargs_unknown_tool",
        lambda f: multi_turn(f, data="unknown_tool"),
        "extra_info.tools_kwargs names tools ['calculator'] that",
    ),
    (
        "need_tools_kwargs_but_none",
        lambda f: multi_turn(f, data="no_tools_kwargs"),
        "extra_info.need_tools_kwargs is true but extra_info.tools_kwargs is empty",
    ),
    (
        "interaction_kwargs_without_name",
        lambda f: (
            multi_turn(f, data="no_interaction_name") + [f"{MT}.interaction_config_path={f['interaction']}"]
        ),
        "extra_info.interaction_kwargs.name=None names no interaction",
    ),
    (
        "data_tools_differ",
        lambda f: multi_turn(f) + [f"data.tool_config_path={f['bad_yaml']}"],
        "differs from actor_rollout_ref.rollout.multi_turn.tool_config_path",
    ),
    (
        "inference_chat_template",
        lambda f: multi_turn(f) + [f"{MT}.use_inference_chat_template=True"],
        f"{MT}.use_inference_chat_template=True is not supported by verl_lite",
    ),
    (
        "format_unknown",
        lambda f: multi_turn(f) + [f"{MT}.format=llama3_json"],
        f"{MT}.format='llama3_json' is not a tool-call format; the formats are ['glm', 'gpt-oss', 'hermes', "
        "'qwen3_coder']",
    ),
    (
        "repeat_rollouts",
        lambda f: multi_turn(f) + [f"{MT}.num_repeat_rollouts=2"],
        f"{MT}.num_repeat_rollouts=2 is not supported by verl_lite",
    ),
    (
        "custom_async_server",
        lambda f: multi_turn(f) + [f"{AGENT}.custom_async_server.path=/srv.py"],
        f"{AGENT}.custom_async_server.path=/srv.py is not supported by verl_lite",
    ),
    (
        "truncate_side",
        lambda f: multi_turn(f) + [f"{MT}.tool_response_truncate_side=top"],
        f"{MT}.tool_response_truncate_side='top' is not one of ['left', 'middle', 'right']",
    ),
    (
        "sanity_mode",
        lambda f: multi_turn(f) + [f"{MT}.tokenization_sanity_check_mode=loose"],
        f"{MT}.tokenization_sanity_check_mode='loose' is not one of",
    ),
    (
        "tool_timeout_zero",
        lambda f: multi_turn(f) + [f"{MT}.tool_call_timeout=0"],
        f"{MT}.tool_call_timeout=0.0 must be a finite number > 0",
    ),
    (
        "max_parallel_calls_zero",
        lambda f: multi_turn(f) + [f"{MT}.max_parallel_calls=0"],
        f"{MT}.max_parallel_calls=0 must be a positive integer",
    ),
    # rollout tracing (verl's rollout.trace.*): refused by name, not accepted and left doing nothing
    *[
        (
            f"trace_backend_{backend}",
            lambda f, backend=backend: multi_turn(f) + [f"{TRACE}.backend={backend}"],
            f"{TRACE}.backend={backend} is not supported by verl_lite: verl_lite does not trace rollouts "
            "(verl's weave / mlflow / trackio spans); leave it null",
        )
        for backend in ("mlflow", "weave")
    ],
    (
        "max_user_turns_zero",
        lambda f: multi_turn(f) + [f"{MT}.max_user_turns=0"],
        f"{MT}.max_user_turns=0 must be a positive integer or null (no limit)",
    ),
]


@pytest.mark.parametrize("case, overrides, fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_multi_turn_input_fails_before_ray_with_one_line(
    case, overrides, fragment, files, tmp_path, monkeypatch, capsys
):
    argv = [*BASE, f"trainer.default_local_dir={tmp_path}/run", *overrides(files)]
    code, message, _ = run_in_process(argv, monkeypatch, capsys)
    assert code == 2 and message.startswith("verl_lite: ") and len(message.splitlines()) == 1, message
    fragment = fragment.replace("{r}", str(files["root"]))
    assert fragment in message and "Traceback" not in message, message


def test_good_multi_turn_input_passes_every_start_up_check(files, tmp_path, monkeypatch, capsys):
    """verl's tool and interaction files, tool-agent rows: everything passes and Ray is reached."""
    reached = []

    def stop(cfg):
        reached.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr(main_ppo, "start_ray", stop)
    argv = [*BASE, f"trainer.default_local_dir={tmp_path}/run", *multi_turn(files)]
    argv += [f"{MT}.interaction_config_path={files['interaction']}", f"{AGENT}.num_workers=4"]
    # read only with a trace backend, in verl too: accepted (with a note) while the backend is null
    argv += [f"{TRACE}.token2text=True", f"{TRACE}.max_samples_per_step_per_worker=2"]
    from verl_lite.config.compose import compose_config

    with pytest.raises(SystemExit) as info:
        main_ppo.run(compose_config(argv, "demo"))
    assert info.value.code == 0 and reached, capsys.readouterr().err


def test_rows_without_agent_name_beside_tool_rows_are_logged_with_their_count(
    files, tmp_path, monkeypatch, capsys
):
    """A mix of tool-agent rows and rows without agent_name is allowed (verl's default loop runs the
    latter), but not silently: the count and the first such row are logged before Ray."""
    monkeypatch.setattr(main_ppo, "start_ray", lambda cfg: (_ for _ in ()).throw(SystemExit(0)))
    argv = [*BASE, f"trainer.default_local_dir={tmp_path}/run", *multi_turn(files, data="some_agent_name")]
    from verl_lite.config.compose import compose_config

    with pytest.raises(SystemExit) as info:
        main_ppo.run(compose_config(argv, "demo"))
    out, err = capsys.readouterr()
    assert info.value.code == 0, err
    said = [line for line in out.splitlines() if "have no agent_name" in line]  # the console's log lines
    assert len(said) == 1 and said[0].endswith(
        f"WARNING: data.train_files: 3 of 8 rows (the first: {files['some_agent_name']} row 5) have no "
        f"agent_name and run {AGENT}.default_agent_loop=single_turn_agent: no tool calls for them"
    ), said


def test_a_tool_config_of_five_tools_passes_at_the_default_loop_timeout_and_derives_it(
    files, tmp_path, monkeypatch, capsys
):
    """loop_timeout's null default is (3 + 2 x tools) x tool_call_timeout: no number of tools is refused
    at verl's defaults, and the rollout's deadline grows with the tools (an explicit value below the
    rule is refused: loop_timeout_below_a_trajectorys_last_tool_calls)."""
    import copy

    import yaml

    from verl_lite.agent_loop.checks import loop_timeout_s

    one = yaml.safe_load(VERL_GSM8K_TOOL_CONFIG)["tools"][0]
    tools = [one]
    for i in range(4):
        other = copy.deepcopy(one)
        other["tool_schema"]["function"]["name"] = f"calc_gsm8k_reward_{i}"
        tools.append(other)
    files = dict(files, five_tools=write_yaml(tmp_path / "five_tools.yaml", {"tools": tools}))
    reached = []

    def stop(cfg):
        reached.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr(main_ppo, "start_ray", stop)
    argv = [*BASE, f"trainer.default_local_dir={tmp_path}/run", *multi_turn(files, tools="five_tools")]
    from verl_lite.config.compose import compose_config

    with pytest.raises(SystemExit) as info:
        main_ppo.run(compose_config(argv, "demo"))
    assert info.value.code == 0 and reached, capsys.readouterr().err
    rollout = reached[0].actor_rollout_ref.rollout
    assert rollout.agent.loop_timeout is None
    assert loop_timeout_s(rollout) == (3 + 2 * 5) * rollout.multi_turn.tool_call_timeout == 780


def _with_sandbox(files, tmp_path, **sandbox_config) -> dict:
    """`files` plus `sandbox`: verl's GSM8K tool beside verl's SandboxFusionTool configured so."""
    import yaml

    gsm8k = yaml.safe_load(VERL_GSM8K_TOOL_CONFIG)["tools"][0]
    sandbox = yaml.safe_load(VERL_SANDBOX_TOOL_CONFIG)["tools"][0]
    sandbox["config"].update(sandbox_config)
    return dict(files, sandbox=write_yaml(tmp_path / "sandbox_tools.yaml", {"tools": [gsm8k, sandbox]}))


def test_a_sandbox_tool_with_no_sandbox_answering_is_refused_before_ray_naming_the_url(
    files, tmp_path, monkeypatch, capsys
):
    """Issue 37's done-when: sandbox_fusion configured, nothing reachable at its URL: one line naming
    the file, the URL and the fix, before Ray; no model-written code is started on this machine."""
    from verl_lite.tools import local_sandbox

    monkeypatch.setattr(local_sandbox, "run_python", lambda *a, **k: pytest.fail("code ran on the host"))
    url = closed_url()
    files = _with_sandbox(files, tmp_path, sandbox_fusion_url=url)
    argv = [*BASE, f"trainer.default_local_dir={tmp_path}/run", *multi_turn(files, tools="sandbox")]
    code, message, seconds = run_in_process(argv, monkeypatch, capsys)
    assert code == 2 and len(message.splitlines()) == 1 and "Traceback" not in message, message
    assert message.startswith(
        f"verl_lite: {files['sandbox']}: tools[1] (verl.tools.sandbox_fusion_tools.SandboxFusionTool): building "
        f"the tool raised ValueError: config.sandbox_fusion_url={url!r} cannot be reached ("
    ), message
    assert message.endswith(
        "; start SandboxFusion there or fix the URL, or set config.run_code_locally=true to run the model's "
        "code on this machine (docs/multi_turn.md, 'The code sandbox')"
    ), message


def test_run_code_locally_passes_start_up_and_says_so_in_one_line(files, tmp_path, monkeypatch, capsys):
    """The opt-in key: start-up passes with nothing at the URL, and the console says once, before Ray,
    that the model's code runs on this machine and that the URL is not contacted."""
    monkeypatch.setattr(main_ppo, "start_ray", lambda cfg: (_ for _ in ()).throw(SystemExit(0)))
    url = closed_url()
    files = _with_sandbox(files, tmp_path, sandbox_fusion_url=url, run_code_locally=True)
    argv = [*BASE, f"trainer.default_local_dir={tmp_path}/run", *multi_turn(files, tools="sandbox")]
    from verl_lite.config.compose import compose_config

    with pytest.raises(SystemExit) as info:
        main_ppo.run(compose_config(argv, "demo"))
    out, err = capsys.readouterr()
    assert info.value.code == 0, err
    said = [line for line in out.splitlines() if "config.run_code_locally=true" in line]
    assert (
        len(said) == 1
        and "code_interpreter: config.run_code_locally=true: the model's Python runs on this machine"
        in said[0]
        and f"sandbox_fusion_url {url!r} is not contacted" in said[0]
    ), out
