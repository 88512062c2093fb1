"""null, as verl's config lets a user write it: composed everywhere verl composes it, judged where it is read.

verl's config lets a key hold null wherever its YAML gives no type (data, trainer, reward_model,
custom_reward_function, ...) or its dataclass says Optional, and verl's launch scripts pass null
through shell variables (`custom_reward_function.name=null` in its main CI script). Every such key
is `X | None` in the schema (tests/config/test_nulls.py walks verl's list), so Hydra composes it;
what null then means is decided here, once, before anything reads the value:

  - where null is the key's default (a null default, or a link that resolves to null), or the
    key's domain takes null (`POS_INT.or_null("no limit")`, declared beside the field), it keeps
    that meaning;
  - where a feature that is off is the only reader (config/features.py: the function's name while
    custom_reward_function.path is null, the reward model's keys while reward_model.enable=False),
    nothing reads it, as in verl;
  - anywhere else the run would read a null where it needs a value: one line `<key>=null must be
    <a value of the key's type>` (verl would fail there later, with a traceback).

Keys with a value domain (config/domains.py) or a support-table rule (config/support.py) are judged
by those: a domain says whether it takes null, the support table has already judged the value. The
rest get a domain that refuses only null; config/values.py checks them all in one walk.
"""

from __future__ import annotations

import functools

from verl_lite.config import keys
from verl_lite.config.domains import DOMAINS
from verl_lite.config.fields import Domain
from verl_lite.config.schema import FIELDS
from verl_lite.config.support import rule_for

KINDS = (  # a field's type, as the message names a value of it
    ("bool", "true or false"),
    ("int", "an integer"),
    ("float", "a number"),
    ("str", "a string"),
    ("dict", "a mapping, e.g. {}"),
    ("list", "a list"),
)


def nullable_types() -> dict[str, str]:
    """{dotted key: its annotation} of every leaf typed `X | None` in the schema."""
    sections = {k.rsplit(".", 1)[0] for k, _ in FIELDS}
    return {
        k: f.type
        for k, f in FIELDS
        if k not in sections and isinstance(f.type, str) and f.type.replace(" ", "").endswith("|None")
    }


def _kind(annotation: str) -> str:
    base = annotation.split("|")[0].strip()
    return next(says for name, says in KINDS if base == name or base.startswith(f"{name}["))


@functools.cache
def judged_here() -> dict[str, Domain]:
    """{key: a domain refusing only null} for the keys whose null this module judges: typed `X | None`,
    not null by default, with no value domain (a domain says whether it takes null) and no support rule."""
    return {
        key: Domain(lambda v: True, _kind(annotation))
        for key, annotation in nullable_types().items()
        if key not in DOMAINS and rule_for(key) is None and keys.resolved_default(key) is not None
    }
