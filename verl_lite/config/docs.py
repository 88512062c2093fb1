"""Generate docs/config.md, the config reference, from the schema: `python -m verl_lite.config.docs > docs/config.md`.

Every key's default comes from the dataclasses themselves and its meaning from its `# comment` in
the schema modules (config/schema*.py, the one place defaults and their documentation live): at the
end of its line, or right above a field too long for one. What verl_lite accepts of keys it
implements only in part comes from config/support.py. Nested dataclasses become sections named by their dotted path, in declaration order.
tests/config/test_docs.py fails when docs/config.md differs from this output, or when a key has
no comment.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import sys
import tokenize
from pathlib import Path

from verl_lite.config import dialects, keys, schema, support
from verl_lite.config.common import format_value
from verl_lite.config.schema import DEVIATIONS, PPOTrainerConfig

REGENERATE = "python -m verl_lite.config.docs > docs/config.md"


def field_comments(source: str) -> dict[tuple[str, str], str]:
    """(class name, field name) -> the field's comment: at the end of its line, else the comment
    lines right above it (a field that would not fit on one line with its comment)."""
    comments: dict[int, str] = {}  # line number -> its comment
    alone: set[int] = set()  # lines that are a comment only
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
            alone |= {tok.start[0]} if tok.line.lstrip().startswith("#") else set()
    found = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                lines = [n for n in range(stmt.lineno, stmt.end_lineno + 1) if n in comments]
                start = stmt.lineno
                while not lines and start - 1 in alone:
                    start -= 1
                lines = lines or list(range(start, stmt.lineno))
                found[(node.name, stmt.target.id)] = " ".join(comments[n] for n in lines)
    return found


format_default = format_value  # a default as it would be written on a Hydra command line


def sections(obj, prefix: str, comments: dict) -> list[tuple[str, str, list[tuple[str, str, str]]]]:
    """[(dotted path, section comment, [(key, default, meaning), ...]), ...], depth first."""
    rows, nested = [], []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}.{f.name}" if prefix else f.name
        # a field inherited from a base dataclass (e.g. critic.model from ModelConfig) keeps its comment
        meaning = next(
            (comments[c.__name__, f.name] for c in type(obj).__mro__ if (c.__name__, f.name) in comments), ""
        )
        if dataclasses.is_dataclass(value):
            sub = sections(value, key, comments)
            if meaning and sub and sub[0][0] == key:  # a comment on a nested field describes its section
                sub[0] = (key, meaning, sub[0][2])
            nested += sub
        else:
            status = support.describe(key)
            rows.append((key, format_default(value), f"{meaning}. {status}" if status else meaning))
    own = [(prefix, "", rows)] if rows else []
    return own + nested


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def deviations() -> list[str]:
    """The deviations declared beside their fields (`deviates`): key, verl_lite's default, why."""
    out = ["## Deviations from verl", ""]
    out += [f"- `{k}` = `{format_default(keys.written_default(k))}`: {why}." for k, why in DEVIATIONS.items()]
    return out + [""]


def spellings() -> list[str]:
    """verl 0.9's and verl 0.7's spellings of the moved keys (config/dialects.py)."""
    out = [
        "## verl 0.9 and verl 0.7 spellings",
        "",
        "verl 0.9 moved these keys (a section: every key under it). Each spelling of a line sets the key after",
        "the arrow, the one this page lists. An older spelling is said once on the console; two spellings",
        "of one value set to different values in one command are refused, naming both.",
        "",
    ]
    for m in dialects.MOVES:
        older = [k for k in dict.fromkeys((m.key, *m.older)) if k != m.verl09]
        label = "also (verl 0.9 links one to the other)" if m.quiet else "older"
        out.append(f"- verl 0.9 `{m.verl09}`, {label} {', '.join(f'`{k}`' for k in older)} -> `{m.key}`")
    for group, (accepted, why) in dialects.GROUPS.items():
        out.append(
            f"- verl 0.9's config group `{group}`: {', '.join(f'`{v}`' for v in accepted)} accepted; {why}"
        )
    return out + [""]


def verl_added() -> list[str]:
    """verl 0.9.1's keys the dataclasses do not declare (config/verl_keys.py), one line per section."""
    out = [
        "## verl 0.9.1's other keys",
        "",
        "Read from verl 0.9.1's generated config (`verl_lite/config/verl_0_9_1_ppo_trainer.yaml`). A verl 0.9",
        "spelling of a key this page lists (`reward.*`, the legacy `sandbox_fusion`) shows that key's value",
        "and sets it. Every other one is accepted at verl's default (`--cfg job` shows it) and refused by",
        "name when set otherwise, as its feature is not in verl_lite; under a section whose rule on this",
        "page says otherwise (the profilers: accepted, no effect), that rule holds.",
        "",
    ]
    by_section: dict[str, list[str]] = {}
    for key in keys.added_keys():
        section, _, name = key.rpartition(".")
        by_section.setdefault(section or "(top level)", []).append(name)
    out += [f"- `{s}`: {', '.join(f'`{n}`' for n in names)}" for s, names in by_section.items()]
    out += ["", "Of those, the keys and sections verl_lite has a rule for (config/support.py):", ""]
    added = {k.rsplit(".", i)[0] for k in keys.added_keys() for i in range(k.count(".") + 1)}
    out += [f"- `{r.key}`: {support.describe(r.key)}" for r in support.RULES if r.key in added]
    return out + [""]


def schema_comments() -> dict[tuple[str, str], str]:
    """Field comments of every schema module (schema.py and its schema_*.py sections)."""
    comments: dict[tuple[str, str], str] = {}
    for path in sorted(Path(schema.__file__).parent.glob("schema*.py")):
        comments.update(field_comments(path.read_text()))
    return comments


def render() -> str:
    comments = schema_comments()
    out = [
        "# Config reference",
        "",
        f"Generated from `verl_lite/config/schema.py` by `{REGENERATE}`; do not edit by hand.",
        "Every key can be set on the command line (`key=value`, Hydra syntax). Keys, meanings and defaults",
        "are verl's composed `ppo_trainer` config (verl commit b178a3c); a default written `${key}` follows",
        "that key, as in verl. The embedded tiny CPU demo is the named config `conf/demo.yaml`",
        "(`python -m verl_lite.main_ppo --config-name demo`), which changes only the values it lists.",
        "A `verl_lite://` path names an embedded asset built on first use. Start-up validation checks",
        "the values together and names the key, the value and the fix when something does not fit.",
        "verl's own launch scripts, run here with only paths and sizes swapped: docs/verl_scripts.md.",
        "",
        *deviations(),
        *spellings(),
        *verl_added(),
    ]
    for path, about, rows in sections(PPOTrainerConfig(), "", comments):
        out += [f"## {path}", ""]
        if about:
            out += [about, ""]
        out += ["| key | default | meaning |", "| --- | --- | --- |"]
        out += [f"| `{k}` | `{_cell(d)}` | {_cell(m)} |" for k, d, m in rows]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(render())
