"""What an agent loop's constructor receives, as verl 0.9's AgentLoopWorker passes it
(verl/experimental/agent_loop/agent_loop.py, `_run_agent_loop`):

    cls(trainer_config=DictConfigWrap(config), server_manager=..., tokenizer=..., processor=None,
        hf_model_type=..., dataset_cls=RLHFDataset, data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([...]), **the loop's YAML keys)

`config` is the whole trainer config as a read-only OmegaConf tree (a verl loop reads
`self.config.actor_rollout_ref.model.path`, `self.data_config.get(...)`). verl_lite adds the keyword
`context` (the worker's LoopContext; AgentLoopBase keeps it, a loop's own `**kwargs` may ignore it).
`check_constructor` is the start-up test that a loop class accepts these keywords: a loop written
for verl_lite's earlier `(context, server_manager, **kwargs)` constructor is refused then, in one
line, not at the first rollout.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from omegaconf import OmegaConf

VERL_KEYWORDS = (
    "trainer_config",
    "server_manager",
    "tokenizer",
    "processor",
    "hf_model_type",
    "dataset_cls",
    "data_config",
    "tools",
    "context",
)


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


def loop_arguments(tree, server_manager, context, hf_model_type: str | None) -> dict[str, Any]:
    """verl's constructor keywords for one trajectory's loop (its YAML keys are added by the runner)."""
    from verl_lite.data.rlhf_dataset import RLHFDataset

    return {
        "trainer_config": DictConfigWrap(tree),
        "server_manager": server_manager,
        "tokenizer": context.tokenizer,
        "processor": None,
        "hf_model_type": hf_model_type,
        "dataset_cls": RLHFDataset,
        "data_config": DictConfigWrap(tree.data),
        "tools": ToolListWrap(list(context.tools.values())),
        "context": context,
    }


def check_constructor(cls: type, loop_keys: dict[str, Any], name: str, target: str) -> None:
    """The class's constructor accepts verl's keywords and the loop's YAML keys, or one ValueError."""
    try:
        inspect.signature(cls).bind(**{k: None for k in VERL_KEYWORDS}, **loop_keys)
    except TypeError as e:
        raise ValueError(
            f"agent loop {name!r}: {target}.__init__ does not accept verl's constructor arguments ({e}); verl "
            "builds a loop as cls(trainer_config, server_manager, tokenizer, processor, dataset_cls, data_config, "
            "hf_model_type, tools=..., **its YAML keys): take `*args, **kwargs` and call super().__init__(*args, "
            "**kwargs), as verl's loops do"
        ) from None
