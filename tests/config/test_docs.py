"""docs/config.md is the generator's output for the current schema, and every key has a meaning."""

import dataclasses
from pathlib import Path

from verl_lite.config import docs
from verl_lite.config.schema import PPOTrainerConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def _leaf_keys(obj, prefix=""):
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            yield from _leaf_keys(value, key + ".")
        else:
            yield key


def test_config_doc_is_in_sync_with_the_schema():
    assert DOC.read_text() == docs.render(), f"docs/config.md is out of date: run `{docs.REGENERATE}`"


def test_every_key_is_documented_once():
    rows = [
        row for _, _, rows in docs.sections(PPOTrainerConfig(), "", docs.schema_comments()) for row in rows
    ]
    undocumented = [key for key, _, meaning in rows if not meaning]
    assert undocumented == [], "give these fields a # comment in verl_lite/config/schema*.py"
    text = docs.render()
    for key in _leaf_keys(PPOTrainerConfig()):
        assert text.count(f"| `{key}` |") == 1, key


def test_wrapped_field_keeps_its_comment():
    source = "class A:\n    x: bool = (\n        False  # the meaning\n    )\n    y: int = 1\n"
    assert docs.field_comments(source) == {("A", "x"): "the meaning", ("A", "y"): ""}


def test_a_comment_right_above_a_field_is_its_meaning_and_a_blank_line_ends_it():
    source = (
        "class A:\n    # a note on the keys below\n\n    # the first half\n    # and the rest\n"
        "    x: int = 1\n    y: int = 2  # its own\n    # z's\n    z: int = 3  # wins over the line above\n"
    )
    assert docs.field_comments(source) == {
        ("A", "x"): "the first half and the rest",
        ("A", "y"): "its own",
        ("A", "z"): "wins over the line above",
    }
