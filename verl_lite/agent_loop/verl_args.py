"""What an agent loop's constructor receives, as verl 0.9.0's AgentLoopWorker passes it
(verl/experimental/agent_loop/agent_loop.py, `_run_agent_loop`):

    hydra.utils.instantiate(the loop's entry, trainer_config=DictConfigWrap(config), server_manager=...,
        tokenizer=..., processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([...]))          # plus the entry's own YAML keys

exactly these keywords, so a loop whose __init__ lists verl's parameters without **kwargs builds
here as it does in verl. `config` is the whole trainer config as a read-only OmegaConf tree (a verl
loop reads `self.config.actor_rollout_ref.model.path`, `self.data_config.get(...)`). verl_lite's own
state for the loop (the worker's LoopContext: tools, parser, renderer; the model's hf_model_type) is
not a keyword: `build_loop` holds it in a context variable while the class is built, and
AgentLoopBase.__init__ reads it (`loop_state`). `check_constructor` is the start-up test that a loop
class accepts these keywords: a loop written for verl_lite's earlier `(context, server_manager,
**kwargs)` constructor is refused then, in one line, not at the first rollout.
"""

from __future__ import annotations

import dataclasses
import inspect
from contextvars import ContextVar
from typing import Any

from omegaconf import OmegaConf

VERL_KEYWORDS = (
    "trainer_config",
    "server_manager",
    "tokenizer",
    "processor",
    "dataset_cls",
    "data_config",
    "tools",
)
# (LoopContext, hf_model_type) of the loop being built by build_loop; None outside it
_LOOP_STATE: ContextVar[tuple | None] = ContextVar("verl_lite_loop_state", default=None)


class DictConfigWrap:
    """verl's wrapper of a DictConfig (so hydra's instantiate does not resolve it)."""

    def __init__(self, config):
        self.config = config


class ToolListWrap:
    """verl's wrapper of the worker's tool list."""

    def __init__(self, tools: list):
        self.tools = tools


def config_tree(trainer_config=None, rollout_cfg=None, chat_template_kwargs: dict | None = None):
    """The trainer config as a read-only OmegaConf tree. Without one (a runner built alone, in tests):
    the schema's defaults with this rollout config and these chat-template kwargs in place."""
    if trainer_config is None:
        from verl_lite.config.schema import PPOTrainerConfig

        plain = _plain(PPOTrainerConfig())
        if rollout_cfg is not None:
            plain["actor_rollout_ref"]["rollout"] = _plain(rollout_cfg)
        plain["data"]["apply_chat_template_kwargs"] = dict(chat_template_kwargs or {})
    else:
        plain = _plain(trainer_config)
    tree = OmegaConf.create(plain, flags={"allow_objects": True})
    OmegaConf.set_readonly(tree, True)
    return tree


def _plain(value):
    """Dataclasses as dicts, the frozen config's FrozenList / FrozenDict as lists and dicts."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def loop_arguments(tree, server_manager, context) -> dict[str, Any]:
    """verl's constructor keywords for one trajectory's loop (its YAML keys are added by the runner)."""
    from verl_lite.data.rlhf_dataset import RLHFDataset

    return {
        "trainer_config": DictConfigWrap(tree),
        "server_manager": server_manager,
        "tokenizer": context.tokenizer,
        "processor": None,
        "dataset_cls": RLHFDataset,
        "data_config": DictConfigWrap(tree.data),
        "tools": ToolListWrap(list(context.tools.values())),
    }


def build_loop(cls: type, arguments: dict[str, Any], loop_keys: dict[str, Any], context, hf_model_type):
    """`cls(**arguments, **loop_keys)` (verl's keywords, the loop's YAML keys), with verl_lite's state
    for AgentLoopBase.__init__ (`loop_state`) set meanwhile."""
    token = _LOOP_STATE.set((context, hf_model_type))
    try:
        return cls(**arguments, **loop_keys)
    finally:
        _LOOP_STATE.reset(token)


def loop_state() -> tuple:
    """(LoopContext, hf_model_type) of the loop being built; (None, None) outside build_loop (a test)."""
    return _LOOP_STATE.get() or (None, None)


def check_constructor(cls: type, loop_keys: dict[str, Any], name: str, target: str) -> None:
    """The class's constructor accepts verl's keywords and the loop's YAML keys, or one ValueError."""
    try:
        inspect.signature(cls).bind(**{k: None for k in VERL_KEYWORDS}, **loop_keys)
    except TypeError as e:
        raise ValueError(
            f"agent loop {name!r}: {target}.__init__ does not accept verl's constructor arguments ({e}); verl "
            "builds a loop as cls(trainer_config=, server_manager=, tokenizer=, processor=, dataset_cls=, "
            "data_config=, tools=, **its YAML keys): take `*args, **kwargs` and call super().__init__(*args, "
            "**kwargs), as verl's loops do"
        ) from None
