"""What a schema field declares beside itself: the values it takes (its domain, a choice set
included), the features that read it (config/gates.py), its support rule (config/support.py),
verl's other spellings of it and, where its default or meaning differs from verl's, why.
`key(default, domain, gate=..., rule=..., verl09=..., older=..., deviates=...)` is a dataclass field whose metadata holds them;
`declared` walks the schema's fields once (config/schema.FIELDS), and config/domains.py,
config/features.py, config/nulls.py and config/dialects.py read their tables from that walk.

A domain says what one value alone may be: a size a positive integer, a rate a finite number in its
interval, a mode one of its choices. Hydra already refuses a value of the wrong type (`lr=fast`), not
`lr=nan`, `lr=-1` or `loss_agg_mode=token-avg`. Imports nothing of config/: the schema modules use it.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def show(value) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return "null" if value is None else str(value) if not isinstance(value, str) else repr(value)


@dataclass(frozen=True)
class Domain:
    test: Callable[[Any], bool]
    says: str  # "must be <says>"
    nullable: bool = False  # null is allowed (and means what `says` says)
    choices: tuple = ()  # a choice set: the message lists it

    def holds(self, value) -> bool:
        return (self.nullable and value is None) or (value is not None and self.test(value))

    def or_null(self, meaning: str) -> Domain:
        return dataclasses.replace(self, says=f"{self.says} or null ({meaning})", nullable=True)

    def problem(self, key: str, value) -> str | None:
        """One line naming the key, the value and what is allowed; None when the value holds."""
        if self.holds(value):
            return None
        if self.choices:
            return f"{key}={value!r} is not one of {list(self.choices)}{self.says}"
        return f"{key}={show(value)} must be {self.says}"


def choice(values: tuple, note: str = "", test: Callable[[Any], bool] | None = None) -> Domain:
    """One of `values` (`test`: a wider rule, e.g. a KL type with a trailing '+'); `note` ends the message."""
    return Domain(test or (lambda v: v in values), f" {note}" if note else "", choices=values)


@dataclass(frozen=True)
class Spelled:
    """verl's other spellings of a field (config/dialects.py reads them from the schema)."""

    verl09: str | None = None  # verl 0.9.1's spelling, where it is not the field's own key
    older: tuple[str, ...] = ()  # verl 0.7's spellings
    quiet: bool = False  # verl 0.9 links the spellings to each other: using an older one is not news


DEFAULT = "the default"  # accepted: only the schema's default value
ANY = "any value"  # accepted: every value (the key changes nothing here)
FOLLOWS = "the key it links"  # accepted: only the value of the key its default links to


@dataclass(frozen=True)
class Rule:
    """What verl_lite does with a key of verl's it does not implement in full (config/support.py)."""

    key: str  # a dotted key, or a section: every key under it ('' beside a field: the field's)
    accepted: object = DEFAULT  # DEFAULT | ANY | FOLLOWS | a tuple of values
    instead: str = ""  # refused: what to use instead
    note: str = ""  # accepted at a non-default value: said once in the log
    also: tuple = ()  # FOLLOWS: values accepted besides the linked one (verl's null fallback)


def no_effect(note: str = "") -> Rule:
    return Rule("", ANY, note=note)


def refused(instead: str) -> Rule:
    """Accepted only at the default."""
    return Rule("", DEFAULT, instead=instead)


def only(values: tuple, instead: str, note: str = "") -> Rule:
    return Rule("", tuple(values), instead=instead, note=note)


def follows(instead: str, also: tuple = ()) -> Rule:
    """Accepted only at the value of the key its default links (and `also`)."""
    return Rule("", FOLLOWS, instead=instead, also=also)


def key(
    default: Any = dataclasses.MISSING,
    domain: Domain | None = None,
    *,
    factory: Any = dataclasses.MISSING,
    gate: Any = (),
    rule: Rule | None = None,
    verl09: str | None = None,
    older: tuple[str, ...] = (),
    quiet: bool = False,
    deviates: str = "",
):
    """A schema field with its domain beside it (`factory`: a mutable default's factory), the
    feature(s) that read it (`gate`: a config/gates.Gate or a tuple of them), its support rule where
    verl_lite does not implement it in full (`rule`) and verl's other spellings of it (`verl09`,
    `older`); a section's gates, rule and spellings cover every key under it. `deviates`: why its
    default or meaning differs from verl's, where it does (docs/config.md lists them)."""
    spelled = Spelled(verl09, tuple(older), quiet) if verl09 or older else None
    gates = gate if isinstance(gate, tuple) else (gate,)
    metadata = {"domain": domain, "spelled": spelled, "gate": gates, "rule": rule, "deviates": deviates}
    return dataclasses.field(default=default, default_factory=factory, metadata=metadata)


def declared(cls: type, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field]]:
    """(dotted key, field) of every field of a schema dataclass and of its sections, in order (a
    section's own field before its keys): the one walk config/'s tables are read from."""
    instance = cls()
    for f in dataclasses.fields(cls):
        yield f"{prefix}{f.name}", f
        value = getattr(instance, f.name)
        if dataclasses.is_dataclass(value):
            yield from declared(type(value), f"{prefix}{f.name}.")


POS_INT = Domain(lambda v: _is_int(v) and v > 0, "a positive integer")
NON_NEG_INT = Domain(lambda v: _is_int(v) and v >= 0, "an integer >= 0")
POS = Domain(lambda v: _is_num(v) and v > 0, "a finite number > 0")
NON_NEG = Domain(lambda v: _is_num(v) and v >= 0, "a finite number >= 0")
UNIT = Domain(lambda v: _is_num(v) and 0 <= v <= 1, "a number in [0, 1]")
UNIT_OPEN = Domain(lambda v: _is_num(v) and 0 < v < 1, "a number in (0, 1)")
SHARE = Domain(lambda v: _is_num(v) and 0 < v <= 1, "a number in (0, 1]")
BETAS = Domain(
    lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and all(_is_num(b) and 0 <= b < 1 for b in v),
    "two numbers in [0, 1), e.g. [0.9, 0.999]",
)
TOP_K = Domain(lambda v: _is_int(v) and v >= -1, "-1 (no top-k) or a positive integer")
WARMUP_STEPS = Domain(lambda v: _is_int(v) and v >= -1, "-1 (use lr_warmup_steps_ratio) or an integer >= 0")
FREQ = Domain(_is_int, "an integer (a step count; <= 0: never)")
MAX_SAMPLES = Domain(lambda v: _is_int(v) and (v == -1 or v > 0), "-1 (all rows) or a positive integer")
FINITE = Domain(_is_num, "a finite number")
INT_LIMIT = Domain(_is_int, "an integer (<= 0: no limit)")
TEXT = Domain(lambda v: isinstance(v, str), "a string")
LORA_RANK = Domain(lambda v: _is_int(v) and v >= 0, "0 (full fine-tuning) or a positive LoRA rank")
MICRO = POS_INT.or_null("unset")
SHARDS = Domain(lambda v: _is_int(v) and (v == -1 or v > 0), "-1 (all ranks) or a positive integer")
FOLLOWS_ACTOR = POS_INT.or_null("the actor's")
