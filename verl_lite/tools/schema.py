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

The objects are verl's pydantic models (verl/tools/schemas.py, same names and fields), so a tool
written for verl reads `tool_schema.function.name` or calls `.model_dump()` unchanged; `ToolSchema`
is verl's OpenAIFunctionToolSchema built from a checked dict. It goes into the chat template
(`tools=`) as the plain dict `as_dict` returns: the fields written, nulls left out (verl's
`model_dump(exclude_unset=True, exclude_none=True)`). Fields verl's models do not know (a
property's `items`, ...) are kept as written rather than dropped. A known field of the wrong type is
a ValueError naming its path (checked by hand first, for that one line; pydantic's own error lists
every field). ToolResponse, a tool call's result, is verl's pydantic model too.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


def _expect(value, kind, path: str, what: str):
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ValueError(f"{path} must be {what}, got {value!r}")
    return value


def _check_property(name: str, prop, path: str) -> None:
    _expect(prop, dict, path, "a mapping {type, description, enum, ...}")
    kind = prop.get("type")
    if not (isinstance(kind, list) and kind and all(isinstance(k, str) for k in kind)):
        _expect(kind, str, f"{path}.type", "a string (e.g. string, number, integer) or a list of them")
    if prop.get("description") is not None:
        _expect(prop["description"], str, f"{path}.description", "a string")
    if prop.get("enum") is not None:
        _expect(prop["enum"], list, f"{path}.enum", "a list of values")


def _check_parameters(params, path: str) -> None:
    _expect(params, dict, path, "a mapping {type, properties, required}")
    _expect(params.get("type"), str, f"{path}.type", "a string (object)")
    props = _expect(params.get("properties"), dict, f"{path}.properties", "a mapping of parameter names")
    for name, prop in props.items():
        _check_property(name, prop, f"{path}.properties.{name}")
    required = _expect(params.get("required", []), list, f"{path}.required", "a list of parameter names")
    missing = [r for r in required if r not in props]
    if missing:
        raise ValueError(f"{path}.required names {missing}, which are not in {path}.properties")


class _Open(BaseModel):
    """verl's models, keeping fields they do not name (so the chat template gets them as written)."""

    model_config = ConfigDict(extra="allow")


class OpenAIFunctionPropertySchema(_Open):
    type: str | list[str]
    description: str | None = None
    enum: list[Any] | None = None


class OpenAIFunctionParametersSchema(_Open):
    type: str
    properties: dict[str, OpenAIFunctionPropertySchema]
    required: list[str] = Field(default_factory=list)


class OpenAIFunctionSchema(_Open):
    name: str
    description: str
    parameters: OpenAIFunctionParametersSchema = Field(
        default_factory=lambda: OpenAIFunctionParametersSchema(type="object", properties={}, required=[])
    )
    strict: bool = False


class OpenAIFunctionToolSchema(_Open):
    type: str
    function: OpenAIFunctionSchema


class OpenAIFunctionParsedSchema(BaseModel):
    name: str
    arguments: str  # JSON string


class OpenAIFunctionCallSchema(BaseModel):
    name: str
    arguments: dict[str, Any]

    @staticmethod
    def from_openai_function_parsed_schema(
        parsed_schema: OpenAIFunctionParsedSchema,
    ) -> tuple[OpenAIFunctionCallSchema, bool]:
        """(the call, whether its arguments failed to decode to a JSON object), as verl's."""
        try:
            arguments = json.loads(parsed_schema.arguments)
        except json.JSONDecodeError:
            arguments = None
        if not isinstance(arguments, dict):
            return OpenAIFunctionCallSchema(name=parsed_schema.name, arguments={}), True
        return OpenAIFunctionCallSchema(name=parsed_schema.name, arguments=arguments), False


class OpenAIFunctionToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: OpenAIFunctionCallSchema


class ToolResponse(BaseModel):
    """What a tool hands back to the model. verl_lite trains text models: `image` and `video` are
    kept for verl's signature and refused by the agent loop when set (an error message to the model)."""

    text: str | None = None
    image: list[Any] | None = None
    video: list[Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _lists(cls, values):
        for key in ("image", "video"):
            if isinstance(values, dict) and key in values and not isinstance(values[key], list):
                raise ValueError(f"ToolResponse.{key} must be a list (wrap a single one: [{key}])")
        return values

    def is_empty(self) -> bool:
        return not self.text and not self.image and not self.video

    def is_text_only(self) -> bool:
        return bool(self.text) and not self.image and not self.video


class ToolSchema(OpenAIFunctionToolSchema):
    """A checked tool schema: verl's model, plus the name the model calls and the template's dict."""

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
        return cls.model_validate(_without_none(value))

    @property
    def name(self) -> str:
        return self.function.name

    def as_dict(self) -> dict[str, Any]:
        """The schema as written, without null fields: what the chat template renders."""
        return schema_dict(self)


def schema_dict(schema) -> dict[str, Any]:
    """A tool schema (verl_lite's, or verl's own model where verl is installed) as the chat template's dict."""
    return schema.model_dump(exclude_unset=True, exclude_none=True)


def _without_none(value):
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value
