"""Command-line overrides as verl users write them, checked against the schema before Hydra sees them.

Hydra's `+key=value` adds a key and `++key=value` forces it. With a typed schema that matters:
  - verl's configs lack some keys verl_lite has (fsdp_config.mixed_precision, ...), so verl's launch
    scripts add them with `+`; Hydra would refuse that ("already at") because the key exists here.
    Such an override becomes a plain one.
  - `+key` / `++key` for a key the schema lacks would be added and then dropped when the config
    becomes dataclasses: silently nothing. It is an error naming the key and the nearest known key,
    except under dict-typed fields (override_config, reward_kwargs, engine_kwargs, ...), whose keys
    are the user's. A plain `key=value` for an unknown key gets the same message (Hydra's own
    suggests `+key`, which would be dropped).
verl 0.9's and verl 0.7's spellings of a moved key (`reward.reward_manager.name` and
`reward_model.reward_manager`, `critic.fsdp.*` and `critic.model.fsdp_config.*`, config/dialects.py)
both set the key the schema holds: a spelling it does not hold is rewritten to it, a verl 0.7 spelling
is said once on the console, two spellings set to different values are refused, naming both. Every
refused override of a command is named in one refusal (one line).
main_ppo applies this to its argv (so sweeps get it too) and compose.compose_config to its list.
"""

from __future__ import annotations

import logging
import re

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import OverrideType
from hydra.errors import HydraException

from verl_lite.config import dialects, keys

log = logging.getLogger("verl_lite.config")


class OverrideError(ValueError):
    """An override that names no key of the schema."""


def _unknown(key: str, line: str) -> OverrideError:
    near = keys.nearest(key)
    hint = f"; did you mean {near}?" if near else ""
    return OverrideError(f"{line}: {key} is not a key of verl_lite's config (verl's ppo_trainer keys){hint}")


def _syntax_error(line: str, error: Exception) -> str:
    """Hydra's parse error (several lines, a caret under the column) as one line that says how to quote."""
    key, sep, value = line.partition("=")
    lines = str(error).split("See https://")[0].splitlines()
    reason = lines[0].strip()
    if len(lines) > 1 and lines[1].strip() == "^" and line in lines[0]:  # a caret under the column
        column = lines[1].index("^") - lines[0].index(line)
        if 0 <= column < len(line):
            reason = f"{reason.split(':')[0]} at character {column + 1}, {line[column]!r}"
    quoted = f"'{key}=\"{value}\"'" if sep and '"' not in value else f"\"{key}='{value}'\""
    return (
        f"{line}: Hydra cannot parse this override ({reason}); a value with spaces, non-ASCII characters "
        f"or any of []{{}}(),:=' needs quotes: {quoted} (the outer quotes are for the shell)"
    )


def _is_config_key(override) -> bool:
    """A key of the trainer's config: not a Hydra setting, a config group or a packaged override."""
    key = override.key_or_group
    return override.package is None and "/" not in key and key != "hydra" and not key.startswith("hydra.")


def _parse(line: str):
    try:
        (override,) = OverridesParser.create().parse_overrides([line])
    except HydraException as e:
        raise OverrideError(_syntax_error(line, e)) from e
    return override


def _respelled(line: str, override) -> tuple[str, dialects.Spelling | None]:
    """`line` with verl's other spelling of its key replaced by the schema's (config/dialects.py)."""
    if not _is_config_key(override):
        return line, None
    found = dialects.spelling(override.key_or_group)
    if found is None or found.key == found.given:
        return line, found
    prefix = re.match(r"^[+~]*", line).group(0)
    return prefix + found.key + line[len(prefix) + len(found.given) :], found


def _normalized(line: str) -> tuple[str, dialects.Spelling | None, object]:
    """The line for Hydra, the dialect spelling it used (or None), its parsed value (None: a deletion)."""
    override = _parse(line)
    line, found = _respelled(line, override)
    if found is not None and found.key != found.given:
        override = _parse(line)
    value = None if override.type == OverrideType.DEL else override.value()
    if not _is_config_key(override):
        return line, found, value
    key = override.key_or_group
    if override.type in (OverrideType.ADD, OverrideType.FORCE_ADD):
        if keys.under_open_dict(key):  # the user's key; '+' only where the schema's default lacks it
            return (line.lstrip("+") if keys.has_default(key) else line), found, value
        if keys.is_known(key):
            return line.lstrip("+"), found, value  # verl's '+' for a key verl_lite has: set it
        raise _unknown(found.given if found else key, line)
    if override.type == OverrideType.CHANGE and not keys.is_known(key):
        raise _unknown(found.given if found else key, line)
    if override.type == OverrideType.CHANGE and keys.under_open_dict(key) and not keys.has_default(key):
        raise OverrideError(  # Hydra's "Could not override" is two lines and names no fix (verl's Hydra says the same)
            f"{line}: {key} is a key of your own inside a mapping whose default lacks it; add it with '+{line}'"
        )
    return line, found, value


def _follows(value, verl09: str) -> bool:
    """A value that links another spelling of the same value (verl's `reward_manager.name=${reward_model.
    reward_manager}`): it sets nothing of its own."""
    target = keys.link_target(value, "") if isinstance(value, str) else None
    found = dialects.spelling(target) if target else None
    return found is not None and found.verl09 == verl09


def _conflicts(given: list[tuple[dialects.Spelling, object]]) -> list[OverrideError]:
    """Two spellings of one value set to different values: one problem naming both."""
    first: dict[str, tuple[dialects.Spelling, object]] = {}
    problems = []
    for found, value in given:
        if value is None or keys.link_target(value, found.key) is not None:
            continue  # a deletion, or a link (verl's `ref.x=${actor_rollout_ref.actor.x}`): no value of its own
        seen = first.setdefault(found.verl09, (found, value))
        if seen[0].given != found.given and seen[1] != value:
            problems.append(OverrideError(dialects.conflict(seen, (found, value))))
    return problems


def _refused_together(problems: list[OverrideError]) -> OverrideError:
    """Every refused override of a command in one line (a script with three stale keys learns all
    three at once, not one per try)."""
    if len(problems) == 1:
        return problems[0]
    return OverrideError(f"{len(problems)} overrides are refused: " + "; ".join(str(p) for p in problems))


def normalize_argv(argv: list[str], notes: list[str] | None = None) -> list[str]:
    """main_ppo's argv: every `key=value` token normalized; flags (-m, --config-name X, ...) kept.
    Raises one OverrideError naming every refused override. `notes`: gets one line per verl 0.7
    spelling used (without it they go to the log)."""
    out, problems, spelled = [], [], []
    for token in argv:
        is_override = not token.startswith("-") and ("=" in token or token.startswith("~"))
        if not is_override:
            out.append(token)
            continue
        key = token.lstrip("+~").partition("=")[0]
        if key in dialects.GROUPS:  # verl 0.9's engine group: dp is verl_lite's engine, the rest refused
            problem = dialects.group_problem(key, token.partition("=")[2])
            problems += [OverrideError(problem)] if problem else []
            continue
        try:
            line, found, value = _normalized(token)
        except OverrideError as e:
            problems.append(e)
            continue
        if found is not None and _follows(value, found.verl09):
            continue  # `reward_manager.name=${reward_model.reward_manager}`: one value, linked to itself
        out.append(line)
        if found is not None:
            spelled.append((found, value))
    problems += _conflicts(spelled)
    if problems:
        raise _refused_together(problems)
    said = list(dict.fromkeys(dialects.note(f) for f, _ in spelled if f.old))
    if notes is None:
        for line in said:
            log.info("%s", line)
    else:
        notes += said
    return out


def _set(cfg, key: str, value) -> None:
    *path, leaf = key.split(".")
    node = cfg
    for part in path:
        node = getattr(node, part)
    if not hasattr(node, leaf):
        raise KeyError(f"{key} is not a key of the config")
    setattr(node, leaf, value)


def apply_to_config(cfg, changes: dict[str, object]) -> None:
    """Set dotted keys of a built (not yet frozen) config as if given on the command line: keys whose
    composed value linked one of them (recorded by compose.build_config) follow the new value."""
    links = keys.links_of(cfg)
    pending = list(changes.items())
    while pending:
        key, value = pending.pop()
        _set(cfg, key, value)
        pending += [(k, value) for k, target in links.items() if target == key and k not in changes]
