"""Agent loops by name: the built-in `single_turn_agent` and `tool_agent`, plus the user's loops
from `rollout.agent.agent_loop_config_path` (verl's format, a YAML list):

    - name: my_agent
      _target_: my_package.my_module.MyAgentLoop   # a subclass of agent_loop.base.AgentLoopBase
      max_steps: 4                                 # further keys: keyword arguments of the class

A loop class decorated with verl's `@register("name")` (agent_loop.registry.register, also at
verl.experimental.agent_loop.register) joins the loops once its module is imported. A row's
`agent_name` picks its loop; rows without one run `rollout.agent.default_agent_loop`. The class of
a loop is imported only when a loop of that name runs (or start-up checks the file); a `verl.*`
_target_ imports through verl_lite's answers to verl's paths (compat/) or an installed verl.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from verl_lite.agent_loop.base import AgentLoopBase
from verl_lite.agent_loop.verl_args import check_constructor
from verl_lite.utils.class_path import import_class, load_target, load_yaml
from verl_lite.utils.verl_paths import verl_installed

KEY = "actor_rollout_ref.rollout.agent.agent_loop_config_path"
SINGLE_TURN = "single_turn_agent"
BUILT_IN = {
    SINGLE_TURN: "verl_lite.agent_loop.single_turn:SingleTurnAgentLoop",
    "tool_agent": "verl_lite.agent_loop.tool_agent:ToolAgentLoop",
}
# verl's own loop classes, as a user's agent_loop_config_path may name them
VERL_EQUIVALENTS = {
    "verl.experimental.agent_loop.single_turn_agent_loop.SingleTurnAgentLoop": BUILT_IN[SINGLE_TURN],
    "verl.experimental.agent_loop.tool_agent_loop.ToolAgentLoop": BUILT_IN["tool_agent"],
}


REGISTERED: dict[str, str] = {}  # name -> dotted class path, by @register (verl's decorator)


def register(agent_name: str):
    """verl's `@register("name")`: the decorated loop class runs rows whose agent_name is `name`, once
    its module has been imported (agent_loop_config_path names it, or a module it imports)."""

    def decorator(cls: type) -> type:
        REGISTERED[agent_name] = f"{cls.__module__}.{cls.__qualname__}"
        return cls

    return decorator


@dataclass(frozen=True)
class LoopSpec:
    name: str
    target: str  # "module:Class" (built-in) or a dotted path
    kwargs: dict[str, Any] = field(default_factory=dict)

    def load(self) -> type:
        if ":" in self.target:
            return load_target(self.target)
        try:  # a verl path too: verl_lite answers some of verl's modules (compat/), an installed verl all
            cls = import_class(self.target)
        except ValueError:
            if not self.target.startswith("verl.") or verl_installed():
                raise
            raise ValueError(
                f"agent loop {self.name!r}: _target_ {self.target} is not supported by verl_lite: verl's class "
                f"has no equivalent here (equivalents exist for {sorted(VERL_EQUIVALENTS)})"
            ) from None
        if not issubclass(cls, AgentLoopBase):
            raise ValueError(
                f"agent loop {self.name!r}: {self.target} is not a subclass of verl_lite.agent_loop.base.AgentLoopBase"
            )
        if not inspect.iscoroutinefunction(cls.run):  # else found only when the first step awaits it
            raise ValueError(
                f"agent loop {self.name!r}: {self.target}.run must be an async method (async def run(self, "
                "sampling_params, **kwargs)), as AgentLoopBase.run is"
            )
        check_constructor(cls, self.kwargs, self.name, self.target)
        # here, not at the top: verl_hooks imports tool_agent, which imports much
        from verl_lite.agent_loop.verl_hooks import unsupported_hooks

        problem = unsupported_hooks(cls)
        if problem is not None:
            raise ValueError(f"agent loop {self.name!r}: {self.target} {problem}")
        return cls


def _user_spec(item, where: str) -> LoopSpec:
    if (
        not isinstance(item, dict)
        or not isinstance(item.get("name"), str)
        or not isinstance(item.get("_target_"), str)
    ):
        raise ValueError(
            f"{where} must be a mapping with a string `name` and `_target_` (a dotted class path), got {item!r}"
        )
    kwargs = {k: v for k, v in item.items() if k not in ("name", "_target_")}
    return LoopSpec(item["name"], VERL_EQUIVALENTS.get(item["_target_"], item["_target_"]), kwargs)


def agent_loops(config_path: str | None) -> dict[str, LoopSpec]:
    """The loops by name: built-in ones, then the file's (which may replace a built-in, as in verl)."""
    loops = {name: LoopSpec(name, target) for name, target in {**BUILT_IN, **REGISTERED}.items()}
    if not config_path:
        return loops
    content = load_yaml(config_path, KEY)
    if not isinstance(content, list) or not content:
        raise ValueError(f"{KEY}={config_path!r} must hold a non-empty YAML list of {{name, _target_, ...}}")
    for i, item in enumerate(content):
        spec = _user_spec(item, f"{config_path}: entry {i}")
        loops[spec.name] = spec
    return loops


def check_agent_loops(config_path: str | None) -> list[str]:
    """Start-up: the file reads and every loop class it names imports and is an AgentLoopBase."""
    try:
        for spec in agent_loops(config_path).values():
            spec.load()
    except ValueError as e:
        return [str(e)]
    return []
