"""null, as verl's config lets a user write it: composed everywhere verl composes it, judged where it is read.

verl's config lets a key hold null wherever its YAML gives no type (data, trainer, reward_model,
custom_reward_function, ...) or its dataclass says Optional, and verl's launch scripts pass null
through shell variables (`custom_reward_function.name=null` in its main CI script). Every such key
is `X | None` in the schema (tests/config/test_nulls.py walks verl's list), so Hydra composes it;
what null then means is decided here, once, before anything reads the value:

  - where null is the key's default (a null default, or a link that resolves to null), or the
    schema's comment on the key says what null means (`tokenizer folder; null: path`), it keeps
    that meaning;
  - where a feature that is off is the only reader (config/features.py: the function's name while
    custom_reward_function.path is null, the reward model's keys while reward_model.enable=False),
    nothing reads it, as in verl;
  - anywhere else the run would read a null where it needs a value: one line `<key>=null must be
    <a value of the key's type>` (verl would fail there later, with a traceback).

Keys with a value domain (config/domains.py) or a support-table rule (config/support.py) are judged
by those: a domain says whether it takes null, the support table has already judged the value.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import TYPE_CHECKING

from verl_lite.config import docs, keys
from verl_lite.config.features import reads
from verl_lite.config.schema import PPOTrainerConfig
from verl_lite.config.support import rule_for

if TYPE_CHECKING:
    from verl_lite.config.run import Run

KINDS = (  # a field's type, as the message names a value of it
    ("bool", "true or false"),
    ("int", "an integer"),
    ("float", "a number"),
    ("str", "a string"),
    ("dict", "a mapping, e.g. {}"),
    ("list", "a list"),
)


@functools.cache
def nullable_types() -> dict[str, str]:
    """{dotted key: its annotation} of every leaf typed `X | None` in the schema."""
    found: dict[str, str] = {}

    def walk(cls, prefix: str) -> None:
        instance = cls()
        for f in dataclasses.fields(cls):
            value = getattr(instance, f.name)
            if dataclasses.is_dataclass(value):
                walk(type(value), f"{prefix}{f.name}.")
            elif isinstance(f.type, str) and f.type.replace(" ", "").endswith("|None"):
                found[f"{prefix}{f.name}"] = f.type

    walk(PPOTrainerConfig, "")
    return found


def _kind(annotation: str) -> str:
    base = annotation.split("|")[0].strip()
    return next(says for name, says in KINDS if base == name or base.startswith(f"{name}["))


@functools.cache
def null_meanings() -> frozenset[str]:
    """Keys whose schema comment says what null means for them."""
    rows = docs.sections(PPOTrainerConfig(), "", docs.schema_comments())
    return frozenset(
        key for _, _, section in rows for key, _, meaning in section if re.search(r"\bnull\b", meaning)
    )


@functools.cache
def judged_here() -> dict[str, str]:
    """{key: what a value of it is} for the keys whose null this module judges: typed `X | None`, not
    null by default, null given no meaning by the schema, with no value domain and no support rule."""
    from verl_lite.config.domains import DOMAINS  # domains.py imports this module

    return {
        key: _kind(annotation)
        for key, annotation in nullable_types().items()
        if key not in DOMAINS
        and rule_for(key) is None
        and key not in null_meanings()
        and keys.resolved_default(key) is not None
    }


ABSENT = object()  # the key's section is itself null (verl's `algorithm.rollout_correction=null`)


def lookup(cfg, key: str):
    node = cfg
    for part in key.split("."):
        if node is None:
            return ABSENT
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return node


def check_nulls(cfg, run: Run | None = None) -> list[str]:
    """One line per key the run reads that holds a null it cannot take (`run=None`: every key). A key
    that links another key judged here (`run.links`) is left to that key, as in config/domains.py."""
    judged, links = judged_here(), run.links if run is not None else {}

    def read(key: str) -> bool:
        return run is None or reads(cfg, run, key)

    return [
        f"{key}=null must be {kind}"
        for key, kind in judged.items()
        if lookup(cfg, key) is None and read(key) and not (links.get(key) in judged and read(links[key]))
    ]
