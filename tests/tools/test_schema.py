"""Tool schemas as verl's pydantic models check them: each wrong field named by its path."""

import pytest

from tests.helpers.agent import schema
from verl_lite.tools.schema import ToolSchema


def test_a_valid_schema_keeps_its_fields_and_drops_nulls():
    raw = schema("calc", {"a": "first"})
    raw["function"]["strict"] = None
    raw["function"]["parameters"]["properties"]["a"]["items"] = {"type": "string"}  # beyond verl's model
    s = ToolSchema.from_dict(raw)
    assert s.name == "calc"
    out = s.as_dict()
    assert "strict" not in out["function"]
    assert out["function"]["parameters"]["properties"]["a"] == {
        "type": "string",
        "description": "first",
        "items": {"type": "string"},
    }


def test_parameters_may_be_left_out():
    assert (
        ToolSchema.from_dict({"type": "function", "function": {"name": "now", "description": "time"}}).name
        == "now"
    )


@pytest.mark.parametrize(
    "change, fragment",
    [
        (lambda s: s.pop("function"), "tool_schema.function must be a mapping"),
        (lambda s: s["function"].pop("name"), "tool_schema.function.name must be a non-empty string"),
        (lambda s: s["function"].update(name=" "), "tool_schema.function.name must be a non-empty string"),
        (lambda s: s["function"].pop("description"), "tool_schema.function.description must be a string"),
        (lambda s: s["function"]["parameters"].update(required="a"), "parameters.required must be a list"),
        (lambda s: s["function"]["parameters"].update(required=["b"]), "required names ['b'], which are not"),
        (
            lambda s: s["function"]["parameters"]["properties"]["a"].pop("type"),
            "properties.a.type must be a string",
        ),
        (
            lambda s: s["function"]["parameters"]["properties"]["a"].update(enum="x"),
            "properties.a.enum must be a list",
        ),
        (lambda s: s["function"].update(strict="yes"), "function.strict must be true or false"),
        (lambda s: s.update(type=3), "tool_schema.type must be a string"),
    ],
)
def test_each_wrong_field_is_named(change, fragment):
    raw = schema("calc", {"a": "first"})
    change(raw)
    with pytest.raises(ValueError, match=None) as e:
        ToolSchema.from_dict(raw)
    assert fragment in str(e.value)
