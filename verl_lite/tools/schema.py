"""A tool's schema in verl's (OpenAI's) function format, checked as verl's pydantic models check it.

    tool_schema:
      type: function
      function:
        name: calc_gsm8k_reward                  # required, the name the model calls
        description: ...                         # required
        parameters:                              # optional; default: no parameters
          type: object
          properties: {answer: {type: string, description: ..., enum: [...]}}
          required: [answer]
        strict: false                            # optional

The schema goes into the chat template (`tools=`) as the plain dict `as_dict` returns: the fields
written, nulls left out (verl's `model_dump(exclude_unset=True, exclude_none=True)`). Fields verl's
models do not know (a property's `items`, ...) are kept as written rather than dropped. A known
field of the wrong type is a ValueError naming its path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def _expect(value, kind, path: str, what: str):
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ValueError(f"{path} must be {what}, got {value!r}")
    return value


def _check_property(name: str, prop, path: str) -> None:
    _expect(prop, dict, path, "a mapping {type, description, enum, ...}")
    _expect(prop.get("type"), str, f"{path}.type", "a string (e.g. string, number, integer)")
    if prop.get("description") is not None:
        _expect(prop["description"], str, f"{path}.description", "a string")
    if prop.get("enum") is not None:
        enum = _expect(prop["enum"], list, f"{path}.enum", "a list of strings")
        for item in enum:
            _expect(item, str, f"{path}.enum", "a list of strings")


def _check_parameters(params, path: str) -> None:
    _expect(params, dict, path, "a mapping {type, properties, required}")
    _expect(params.get("type"), str, f"{path}.type", "a string (object)")
    props = _expect(params.get("properties"), dict, f"{path}.properties", "a mapping of parameter names")
    for name, prop in props.items():
        _check_property(name, prop, f"{path}.properties.{name}")
    required = _expect(params.get("required"), list, f"{path}.required", "a list of parameter names")
    missing = [r for r in required if r not in props]
    if missing:
        raise ValueError(f"{path}.required names {missing}, which are not in {path}.properties")


@dataclass(frozen=True)
class ToolSchema:
    """A validated tool schema: the name the model calls and the dict the chat template renders."""

    name: str
    raw: dict[str, Any]

    @classmethod
    def from_dict(cls, value, path: str = "tool_schema") -> ToolSchema:
        _expect(value, dict, path, "a mapping {type, function}")
        _expect(value.get("type"), str, f"{path}.type", "a string (function)")
        function = _expect(
            value.get("function"), dict, f"{path}.function", "a mapping {name, description, ...}"
        )
        name = _expect(function.get("name"), str, f"{path}.function.name", "a non-empty string")
        if not name.strip():
            raise ValueError(f"{path}.function.name must be a non-empty string")
        _expect(function.get("description"), str, f"{path}.function.description", "a string")
        if function.get("parameters") is not None:
            _check_parameters(function["parameters"], f"{path}.function.parameters")
        if function.get("strict") is not None:
            _expect(function["strict"], bool, f"{path}.function.strict", "true or false")
        return cls(name, value)

    def as_dict(self) -> dict[str, Any]:
        """The schema as written, without null fields: what the chat template renders."""
        return _without_none(self.raw)


def _without_none(value):
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value
