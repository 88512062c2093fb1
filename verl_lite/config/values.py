"""The one walk over every value (preflight's VALUES step): each key the run reads, against its
domain (config/domains.py: declared beside the field, a choice set included) or, for a key without
one, against null (config/nulls.py). One line per value outside: `<key>=<value> must be <domain>`.

It reads the config as the user wrote it, before normalisation fills derived values (so
`rollout.response_length=0` is reported, not taken for "unset"). A key is checked only while the run
reads it (config/features.py). A key whose value links another checked key (`${...}`, the links of
config/keys.links_in) is left to that key: a bad value is reported once, where it was set.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from verl_lite.config import keys
from verl_lite.config.domains import DOMAINS
from verl_lite.config.features import reader
from verl_lite.config.fields import Domain
from verl_lite.config.nulls import judged_here

if TYPE_CHECKING:
    from verl_lite.config.run import Run

ABSENT = object()  # the key's section is itself null (verl's `algorithm.rollout_correction=null`)


@functools.cache
def table() -> dict[str, Domain]:
    """{key: its domain} in schema order: every key with a domain, and every key whose null is judged."""
    checked = DOMAINS | judged_here()
    return {key: checked[key] for key in keys.leaf_keys() if key in checked}


def check_values(cfg, run: Run | None = None, links: dict[str, str] | None = None) -> list[str]:
    """One line per value outside its domain (the choice sets aside), for the keys the run reads
    (`run=None`: every key); `links`: the composed config's (default: the run's). preflight's VALUES:
    a size or rate out of its domain stops start-up before anything is resolved from it."""
    return _walk(cfg, run, links, choices=False)


def check_choices(cfg, run: Run | None = None, links: dict[str, str] | None = None) -> list[str]:
    """The same walk over the choice sets (a mode, a dtype, a loss aggregation): preflight's CHECKS,
    so a misspelled choice is reported together with the run's other problems (a missing file, an
    estimator that needs n >= 2), as one refusal."""
    return _walk(cfg, run, links, choices=True)


def _walk(cfg, run: Run | None, links: dict[str, str] | None, choices: bool) -> list[str]:
    links = links if links is not None else run.links if run is not None else {}

    reads = reader(cfg, run) if run is not None else None

    def read(key: str) -> bool:
        return reads is None or reads(key)

    problems = []
    for key, domain in table().items():
        if bool(domain.choices) != choices:
            continue
        target = links.get(key)
        if not read(key) or (target in table() and read(target)):
            continue
        value = keys.lookup(cfg, key, ABSENT)
        problem = None if value is ABSENT else domain.problem(key, value)
        problems += [problem] if problem else []
    return problems
