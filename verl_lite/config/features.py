"""Which keys a run reads: the config's one gate, read from the gates declared beside the schema's
fields (config/gates.py says what a gate is and why start-up rules need one).

A key is read when every gate on it and on the sections above it is on (the critic's token budget:
the critic, and its dynamic batching), a gated section's switches aside (`critic.enable` is always
read). verl 0.9.1's keys the dataclasses do not declare (config/verl_keys.py) have the gates of the
declared sections above them. Roles come from `Run` (config/run.py): at the earliest check, before
the roles are worked out, a role's keys count as read and are checked again once they are known
(verl_lite/preflight.py runs VALUES twice).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from verl_lite.config import keys
from verl_lite.config.gates import Gate
from verl_lite.config.schema import FIELDS

if TYPE_CHECKING:
    from verl_lite.config.run import Run

# {dotted key of a field: its gates}
GATED: dict[str, tuple[Gate, ...]] = {k: f.metadata["gate"] for k, f in FIELDS if f.metadata.get("gate")}


@functools.cache
def gates_of(key: str) -> tuple[tuple[str, Gate], ...]:
    """(the gated field's key, its gate) for every gate covering `key`, outermost first."""
    parts, found = key.split("."), []
    for end in range(1, len(parts) + 1):
        field_key = ".".join(parts[:end])
        rest = ".".join(parts[end:])
        found += [(field_key, g) for g in GATED.get(field_key, ()) if rest not in g.switches]
    return tuple(found)


def _section(cfg, field_key: str):
    """The section holding the field `field_key` (the config itself for a top-level one)."""
    parent = field_key.rpartition(".")[0]
    return keys.lookup(cfg, parent) if parent else cfg


def reader(cfg, run: Run | None) -> Callable[[str], bool]:
    """Whether the run reads a key of this config, each gate worked out once (outermost first, so an
    inner one is asked only inside a section that is on). `cfg`: the config as built, or as composed;
    `run=None`: before the roles are decided (the support table, config/support.py), when a role's
    gate counts as on."""
    state: dict[tuple[str, Gate], bool] = {}

    def on(field_key: str, gate: Gate) -> bool:
        if (field_key, gate) not in state:
            known = run is not None or not gate.by_run
            state[field_key, gate] = not known or bool(gate.on(_section(cfg, field_key), cfg, run))
        return state[field_key, gate]

    return lambda key: all(on(k, g) for k, g in gates_of(key))
