"""Tool-call parsers by name, as `multi_turn.format` names them: verl's `ToolParser` registry.

verl's API, so a parser written for verl registers and runs here unchanged:

    @ToolParser.register("my_format")
    class MyParser(ToolParser):
        async def extract_tool_calls(self, responses_ids, tools=None) -> tuple[str, list[FunctionCall]]: ...

    ToolParser.get_tool_parser("my_format", tokenizer)

The built-in formats are one file each in agent_loop/parsers/ (hermes, gpt-oss, qwen3_coder, glm).
A user's parser registers the way verl lets it: its module is imported before the parser is looked
up, either because `VERL_USE_EXTERNAL_MODULES` names it (comma-separated modules, imported by
`import verl` in verl and by the first look-up here) or because a module the run imports anyway
(an agent loop of agent_loop_config_path, a tool's class) defines it. Where verl is installed, the
user's file gets verl's own ToolParser: the parsers registered with it are found too.

A parser returns verl's `FunctionCall` (arguments as the model's JSON text) or verl_lite's
`ToolCall`. Unlike verl, which logs a malformed call and drops it, the built-in parsers keep it, in
order, with what is wrong with it, so the loop tells the model (a tool-error message) instead of
silently ending the episode; a `FunctionCall` whose arguments are not a JSON object becomes such a
call too (`as_tool_call`).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel

KEY = "actor_rollout_ref.rollout.multi_turn.format"
EXTERNAL_MODULES = "VERL_USE_EXTERNAL_MODULES"
VERL_MODULE = "verl.experimental.agent_loop.tool_parser"


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # set for a malformed call: what the model is told
    bad_arguments: bool = field(
        default=False, compare=False
    )  # the error is the arguments' JSON (verl's "Invalid JSON in arguments for")


class FunctionCall(BaseModel):
    """verl's parsed call: `arguments` is the JSON text the model wrote (not validated)."""

    arguments: str
    name: str
    tool_call_id: str | None = None


class ToolParser(ABC):
    _registry: ClassVar[dict[str, type[ToolParser]]] = {}

    # the special tokens the format ends a tool-calling turn with instead of the model's EOS (GLM's
    # <|observation|>, gpt-oss's <|call|>): a rollout stops at the model's stop tokens only (the
    # tokenizer's EOS and generation_config.json's eos_token_id list, vLLM's rule), so start-up checks
    # that the model lists them (agent_loop/checks.check_turn_end)
    STOP_TOKENS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, tokenizer=None) -> None:
        self.tokenizer = tokenizer

    @property
    def stop_token_ids(self) -> list[int]:
        """Token ids that end a generation so the parser can run (none: the model's EOS does)."""
        return []

    @abstractmethod
    async def extract_tool_calls(
        self, responses_ids: list[int], tools: list | None = None
    ) -> tuple[str, list]:
        """(the text without its tool calls, the calls in order: FunctionCall or ToolCall)."""

    @classmethod
    def register(cls, name: str):
        def decorator(subclass: type[ToolParser]) -> type[ToolParser]:
            cls._registry[name] = subclass
            return subclass

        return decorator

    @classmethod
    def get_tool_parser(cls, name: str, tokenizer) -> ToolParser:
        parsers = registered()
        if name not in parsers:
            raise ValueError(f"{KEY}={name!r} is not a tool-call format; the formats are {sorted(parsers)}")
        return parsers[name](tokenizer)


class TextToolParser(ToolParser):
    """A parser of the decoded text: `parse(text)` is the format; decoding keeps special tokens (the
    markup of gpt-oss and GLM is special tokens) and drops the pad token."""

    @abstractmethod
    def parse(self, text: str, tools: list | None = None) -> tuple[str, list[ToolCall]]:
        """(the text without its tool calls, the calls in order, malformed ones included); `tools`:
        the tool schemas, for a format whose values are typed by them."""

    async def extract_tool_calls(
        self, responses_ids: list[int], tools: list | None = None
    ) -> tuple[str, list]:
        text = self.tokenizer.decode(responses_ids, skip_special_tokens=False)  # read, never re-encoded
        pad = getattr(self.tokenizer, "pad_token", None)
        return self.parse(text.replace(pad, "") if pad else text, tools)


def as_tool_call(call) -> ToolCall:
    """A parser's call as the tool runner takes it: a FunctionCall's JSON arguments parsed."""
    if isinstance(call, ToolCall):
        return call
    name = call.name
    try:
        arguments = json.loads(call.arguments) if call.arguments.strip() else {}
    except json.JSONDecodeError as e:
        return ToolCall(
            name,
            error=f"the tool call's arguments are not valid JSON ({e.msg} at char {e.pos})",
            bad_arguments=True,
        )
    if not isinstance(arguments, dict):
        return ToolCall(name, error="the tool call's arguments must be a JSON object", bad_arguments=True)
    return ToolCall(name, arguments)


def json_call(name, arguments) -> ToolCall:
    """A call whose name and arguments were read from the text: checked as every format needs."""
    if not isinstance(name, str) or not name:
        return ToolCall("", error='the tool call has no "name" string')
    if not isinstance(arguments, dict):
        return ToolCall(name, error='the tool call\'s "arguments" must be a JSON object', bad_arguments=True)
    return ToolCall(name, arguments)


def load_external_modules() -> None:
    """Import the modules `VERL_USE_EXTERNAL_MODULES` names (verl's plug-in hook), so the parsers
    they register are known; an import error propagates with the module's name."""
    for module in filter(None, (m.strip() for m in os.environ.get(EXTERNAL_MODULES, "").split(","))):
        importlib.import_module(module)


def registered() -> dict[str, type]:
    """Every parser by name: the built-in ones, the user's modules', and where verl is installed, those
    registered with verl's own ToolParser (a user's file imports verl's then; ours win a shared name)."""
    importlib.import_module("verl_lite.agent_loop.parsers")  # the built-in formats register themselves
    load_external_modules()
    verls = getattr(sys.modules.get(VERL_MODULE), "ToolParser", ToolParser)
    return {**(verls._registry if verls is not ToolParser else {}), **ToolParser._registry}


def known_formats() -> list[str]:
    return sorted(registered())


def check_format(name: str) -> list[str]:
    """The start-up check of multi_turn.format: one line, naming the known formats."""
    try:
        formats = known_formats()
    except Exception as e:
        return [
            f"{EXTERNAL_MODULES}={os.environ[EXTERNAL_MODULES]!r}: {type(e).__name__}: {e}; fix the module"
        ]
    if name in formats:
        return []
    return [
        f"{KEY}={name!r} is not a tool-call format; the formats are {formats} (your own: "
        f"@ToolParser.register({name!r}) in a module that {EXTERNAL_MODULES}, a tool or an agent loop imports)"
    ]


def tagged_blocks(text: str, start: str, end: str) -> tuple[str, list[str], bool]:
    """(the text without its start...end blocks, the blocks' bodies in order, whether a last start
    was never closed: its body is the rest of the text, dropped from the content)."""
    content, bodies, at = [], [], 0
    while (i := text.find(start, at)) >= 0:
        content.append(text[at:i])
        j = text.find(end, i + len(start))
        if j < 0:
            return "".join(content), bodies, True
        bodies.append(text[i + len(start) : j])
        at = j + len(end)
    content.append(text[at:])
    return "".join(content), bodies, False


def unclosed(start: str, end: str) -> ToolCall:
    return ToolCall("", error=f"a {start} was not closed by {end}")
