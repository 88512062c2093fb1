"""Start-up steps of multi-turn rollouts, `(cfg, run[, datasets]) -> list[str]`, one line per problem.

`check_multi_turn` (the config): rollout.multi_turn's values, the tool and interaction config files
(each loads, every class resolves and builds, every schema is valid), the agent loops of
agent_loop_config_path and default_agent_loop, and that data.tool_config_path (the tools the
prompts list) is the tool config the loops run; last, that multi_turn.format names a parser (tool_parser.py).

`check_turn_end` (once the tokenizer is loaded): a format that ends a tool-calling turn with a token of
its own (GLM's <|observation|>, gpt-oss's <|call|>) needs a model that stops there.

`check_agent_rows` (once the datasets are loaded): every row's agent_name names a loop; its
extra_info is a mapping, its tools_kwargs maps configured tools to {create_kwargs, execute_kwargs,
calc_reward_kwargs, release_kwargs} mappings and is present where need_tools_kwargs says so, its
interaction_kwargs is a mapping (a wrong shape would fail every tool call of the run, seen only in a
counter); its
interaction_kwargs name a configured interaction where an interaction would start; and verl's silent
footgun: multi_turn.enable=True with tools or interactions while every row of the training or the
validation files runs single_turn_agent (no agent_name column, default_agent_loop=single_turn_agent)
would train or validate without ever calling a tool (refused); some such rows are logged with
their count.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

from verl_lite.agent_loop.registry import SINGLE_TURN, agent_loops, check_agent_loops
from verl_lite.agent_loop.tool_parser import check_format
from verl_lite.interactions.registry import build_interactions, check_interaction_config
from verl_lite.tools.registry import check_tool_config, read_tool_config
from verl_lite.utils.class_path import load_yaml

if TYPE_CHECKING:
    from verl_lite.config.run import Run
    from verl_lite.config.schema import PPOTrainerConfig

log = logging.getLogger("verl_lite")
MT = "actor_rollout_ref.rollout.multi_turn"
AGENT = "actor_rollout_ref.rollout.agent"
FIX_FOOTGUN = (
    f"set {AGENT}.default_agent_loop=tool_agent, or give the data an agent_name column naming tool_agent "
    "(scripts/data_preprocess/gsm8k_tool_agent_loop.py writes one)"
)


def _num_tools(path: str | None) -> int:
    """The tool config's entries, read without importing them; 1 when unset or unreadable (the
    file's own check reports why)."""
    if not path:
        return 1
    try:
        tools = load_yaml(path, f"{MT}.tool_config_path").get("tools")
    except Exception:
        return 1
    return len(tools) if isinstance(tools, list) and tools else 1


def _loop_timeout(loop_timeout: float, call_timeout: float, num_tools: int) -> list[str]:
    """After its last generation a tool_agent trajectory may run a tool's create and execute, then
    finish (calc_reward and release per tool) and finalize_interaction, each up to call_timeout."""
    need = (3 + 2 * num_tools) * call_timeout
    if loop_timeout >= need:
        return []
    return [
        f"{AGENT}.loop_timeout={loop_timeout:g} is less than (3 + 2 x {num_tools} tools) x {MT}.tool_call_timeout="
        f"{call_timeout:g} = {need:g} s, what a trajectory's tool calls after its last generation may take (create, "
        f"execute, calc_reward and release per tool, finalize_interaction); raise loop_timeout to {need:g} or more"
    ]


def loop_timeout_s(rollout) -> float:
    """`rollout.agent.loop_timeout`, or where it is null what a tool_agent trajectory's calls after its
    last generation may take: (3 + 2 x tools) x tool_call_timeout (so no number of tools is refused
    at the defaults)."""
    mt, given = rollout.multi_turn, rollout.agent.loop_timeout
    return given if given is not None else (3 + 2 * _num_tools(mt.tool_config_path)) * mt.tool_call_timeout


def check_multi_turn(cfg: PPOTrainerConfig, run: Run) -> list[str]:
    r, d = cfg.actor_rollout_ref.rollout, cfg.data
    mt, agent = r.multi_turn, r.agent
    problems: list[str] = []  # the choices of its options: config/values.py
    if mt.enable and agent.loop_timeout is not None:
        problems += _loop_timeout(agent.loop_timeout, mt.tool_call_timeout, _num_tools(mt.tool_config_path))
    timeout = mt.tool_call_timeout
    problems += check_tool_config(mt.tool_config_path, f"{MT}.tool_config_path", timeout)
    problems += check_interaction_config(mt.interaction_config_path, f"{MT}.interaction_config_path", timeout)
    loop_problems = check_agent_loops(agent.agent_loop_config_path)
    problems += loop_problems
    if not loop_problems and agent.default_agent_loop not in agent_loops(agent.agent_loop_config_path):
        names = sorted(agent_loops(agent.agent_loop_config_path))
        problems.append(
            f"{AGENT}.default_agent_loop={agent.default_agent_loop!r} is not an agent loop; the loops are {names}"
        )
    if d.tool_config_path and mt.tool_config_path and d.tool_config_path != mt.tool_config_path:
        problems.append(
            f"data.tool_config_path={d.tool_config_path!r} differs from {MT}.tool_config_path="
            f"{mt.tool_config_path!r}: the prompts would list other tools than the loops run; leave "
            "data.tool_config_path at its default (it follows multi_turn.tool_config_path)"
        )
    elif d.tool_config_path and not mt.tool_config_path:
        problems += check_tool_config(d.tool_config_path, "data.tool_config_path", mt.tool_call_timeout)
    return problems + check_format(mt.format)  # last: the modules imported above may register parsers


def check_turn_end(cfg: PPOTrainerConfig, run: Run, tokenizer) -> list[str]:
    """A format that ends a tool-calling turn with its own token (the parser's STOP_TOKENS: GLM's
    <|observation|>, gpt-oss's <|call|>): a rollout stops only at the model's stop tokens, the
    tokenizer's EOS and the eos_token_id list of the model folder's generation_config.json (vLLM's
    rule, rollout/base.folder_stop_ids), so the token must be one of them, or the model writes past its call."""
    from verl_lite.agent_loop.tool_parser import ToolParser
    from verl_lite.rollout.base import folder_stop_ids

    mt, model = cfg.actor_rollout_ref.rollout.multi_turn, cfg.actor_rollout_ref.model
    parser = ToolParser._registry.get(mt.format)
    if parser is None or not parser.STOP_TOKENS:
        return []
    stops = folder_stop_ids(tokenizer.eos_token_id, model.path)  # what the rollouts stop at
    problems = []
    for token in parser.STOP_TOKENS:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if not isinstance(token_id, int) or token_id == tokenizer.unk_token_id:
            problems.append(
                f"{MT}.format={mt.format!r} ends a tool-calling turn with {token}, which the tokenizer of "
                f"{model.path!r} does not have: use a model of that format, or another format"
            )
        elif token_id not in stops:
            problems.append(
                f"{MT}.format={mt.format!r} ends a tool-calling turn with {token} (id {token_id}), but the model "
                f"stops only at {stops} (its EOS and generation_config.json's eos_token_id, {model.path!r}), so "
                f"it would write past its call; add {token_id} to that list, as the format's own models do"
            )
    return problems


def _absent(value) -> bool:
    """No agent_name: missing, null, or pandas' NaN where other rows of the file have one."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _first(rows, bad) -> tuple[int, object] | None:
    """(count, first offending row) of the rows for which bad(row) is true."""
    found = [row for row in rows if bad(row)]
    return (len(found), found[0]) if found else None


def _row_problems(
    dataset, files_key: str, cfg, loops: dict, tools: set, interactions: set | None
) -> list[str]:
    from verl_lite.data.rlhf_dataset import agent_field

    default = cfg.actor_rollout_ref.rollout.agent.default_agent_loop
    where = lambda row: f"{files_key}: {row['__file__']} row {row['__row__']}"  # noqa: E731
    problems = []

    def report(bad, message) -> None:
        found = _first(dataset.rows, bad)
        if found:
            count, row = found
            more = f" ({count - 1} more rows like it)" if count > 1 else ""
            problems.append(f"{where(row)}{more}: {message(row)}")

    name = lambda row: agent_field(row, "agent_name") or default  # noqa: E731
    report(
        lambda row: row.get("extra_info") is not None and not isinstance(row.get("extra_info"), dict),
        lambda row: (
            f"extra_info={row['extra_info']!r} must be a mapping (verl's layout: index, tools_kwargs, "
            "interaction_kwargs, ...)"
        ),
    )
    report(
        lambda row: _tools_kwargs_shape(row) is not None,
        lambda row: _tools_kwargs_shape(row),
    )
    report(
        lambda row: not isinstance(_info(row).get("interaction_kwargs") or {}, dict),
        lambda row: (
            f"extra_info.interaction_kwargs={row['extra_info']['interaction_kwargs']!r} must be a mapping "
            "({name: <interaction>, ...: its keyword arguments})"
        ),
    )
    if problems:  # the checks below read these fields as mappings
        return problems
    report(
        lambda row: not _absent(row.get("agent_name")) and not isinstance(row.get("agent_name"), str),
        lambda row: f"agent_name={row['agent_name']!r} must be the name of an agent loop (a string) or null",
    )
    report(
        lambda row: name(row) not in loops,
        lambda row: (
            f"agent_name={name(row)!r} is not an agent loop; the loops are {sorted(loops)} "
            f"(add yours with {AGENT}.agent_loop_config_path)"
        ),
    )
    report(
        lambda row: not isinstance(agent_field(row, "tools_kwargs"), dict),
        lambda row: (
            f"extra_info.tools_kwargs must map tool names to {{create_kwargs, execute_kwargs, ...}}, "
            f"got {agent_field(row, 'tools_kwargs')!r}"
        ),
    )
    report(
        lambda row: (
            isinstance(agent_field(row, "tools_kwargs"), dict)
            and set(agent_field(row, "tools_kwargs")) - tools
        ),
        lambda row: (
            f"extra_info.tools_kwargs names tools {sorted(set(agent_field(row, 'tools_kwargs')) - tools)} that "
            f"{MT}.tool_config_path does not configure (it has {sorted(tools)})"
        ),
    )
    report(
        lambda row: (
            (row.get("extra_info") or {}).get("need_tools_kwargs") is True
            and not agent_field(row, "tools_kwargs")
        ),
        lambda row: (
            "extra_info.need_tools_kwargs is true but extra_info.tools_kwargs is empty; give each tool's "
            "create_kwargs (e.g. the ground truth) or set need_tools_kwargs to false"
        ),
    )
    if interactions is not None:
        report(
            lambda row: (
                name(row) == "tool_agent"
                and (agent_field(row, "interaction_kwargs") or {}).get("name") not in interactions
            ),
            lambda row: (
                f"extra_info.interaction_kwargs.name={(agent_field(row, 'interaction_kwargs') or {}).get('name')!r} "
                f"names no interaction of {MT}.interaction_config_path (it has {sorted(interactions)}); "
                "every tool_agent row needs one"
            ),
        )
    return problems


KWARGS_KEYS = ("create_kwargs", "execute_kwargs", "calc_reward_kwargs", "release_kwargs")


def _info(row) -> dict:
    info = row.get("extra_info")
    return info if isinstance(info, dict) else {}


def _tools_kwargs_shape(row) -> str | None:
    """What is wrong with the shape of a row's extra_info.tools_kwargs (None: nothing, or absent)."""
    value = _info(row).get("tools_kwargs")
    if not isinstance(value, dict):
        return None  # absent, or not a mapping: the row checks below say so
    for tool, entry in value.items():
        if entry is None:  # parquet's union of struct fields: a tool named only by other rows
            continue
        where = f"extra_info.tools_kwargs.{tool}"
        if not isinstance(entry, dict):
            return f"{where}={entry!r} must be a mapping with {list(KWARGS_KEYS)}"
        unknown = sorted(k for k, v in entry.items() if k not in KWARGS_KEYS and v is not None)
        if unknown:
            return (
                f"{where} has keys {unknown} that no tool call reads; a tool's entry has {list(KWARGS_KEYS)}"
            )
        for key in KWARGS_KEYS:
            if entry.get(key) is not None and not isinstance(entry[key], dict):
                return f"{where}.{key}={entry[key]!r} must be a mapping of keyword arguments"
    return None


def check_agent_rows(cfg: PPOTrainerConfig, run: Run, train, val) -> list[str]:
    r = cfg.actor_rollout_ref.rollout
    mt, agent = r.multi_turn, r.agent
    try:  # check_multi_turn reported these files already: nothing more to say about the rows then
        loops = agent_loops(agent.agent_loop_config_path)
        tools = (
            {e.schema.name for e in read_tool_config(mt.tool_config_path)} if mt.tool_config_path else set()
        )
        interactions = (
            set(build_interactions(mt.interaction_config_path, timeout_s=mt.tool_call_timeout))
            if mt.interaction_config_path
            else None
        )
    except ValueError:
        return []
    problems = []
    datasets = [(k, ds) for k, ds in (("data.train_files", train), ("data.val_files", val)) if ds is not None]
    for files_key, dataset in datasets:
        problems += _row_problems(dataset, files_key, cfg, loops, tools, interactions)
    if (
        mt.enable
        and (mt.tool_config_path or mt.interaction_config_path)
        and agent.default_agent_loop == SINGLE_TURN
    ):
        for files_key, dataset in datasets:
            problems += _single_turn_rows(
                dataset, files_key, "tool_config_path" if mt.tool_config_path else "interaction_config_path"
            )
    return problems


def _single_turn_rows(dataset, files_key: str, what: str) -> list[str]:
    """verl's silent footgun, per dataset: rows without agent_name run default_agent_loop=single_turn_agent
    although tools or interactions are configured. None of the rows naming a loop is refused; some is
    allowed (a mix of tool and plain tasks) but said, with the count, in the log."""
    from verl_lite.data.rlhf_dataset import agent_field

    plain = [row for row in dataset.rows if agent_field(row, "agent_name") is None]
    single = [row for row in dataset.rows if agent_field(row, "agent_name") in (None, SINGLE_TURN)]
    if dataset.rows and len(single) == len(dataset.rows):
        return [
            f"{MT}.enable=True with {MT}.{what} set, but no row of {files_key} names an agent loop and "
            f"{AGENT}.default_agent_loop=single_turn_agent: every rollout would be single-turn and no "
            f"tool would ever be called; {FIX_FOOTGUN}"
        ]
    if plain:
        row = plain[0]
        log.warning(
            "%s: %d of %d rows (the first: %s row %s) have no agent_name and run %s.default_agent_loop="
            "single_turn_agent: no tool calls for them",
            files_key,
            len(plain),
            len(dataset.rows),
            row["__file__"],
            row["__row__"],
            AGENT,
        )
    return []
