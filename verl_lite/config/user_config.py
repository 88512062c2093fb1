"""A user's config file that extends ppo_trainer (verl's recipe layout), found and checked like the command line.

verl's recipes and users keep their settings in a YAML file of their own,

    python -m verl_lite.main_ppo --config-path=<dir> --config-name=<file> key=value ...

whose `defaults: [ppo_trainer, _self_]` pulls in the trainer config (often with
`hydra.searchpath: [file://verl/trainer/config]`, verl's own config folder relative to where verl is
started). `--config-path` replaces the folder Hydra looks in, so verl_lite's conf/ joins every search
path (`VerlLiteConf`, a search-path plugin): after the user's folder, before any hydra.searchpath
entry. `ppo_trainer` is then verl_lite's from any folder, also from one that holds a verl checkout
(whose verl/trainer/config comes later); verl's spelling of that folder is expected to be absent
elsewhere, and Hydra's warning about it is not shown.

The file's values are composed into the same typed config as command-line values, so the support
table, the value domains and the nulls judge them alike. What Hydra refuses in the file (a key the
schema lacks, a value of the wrong type, a defaults entry naming a config group of verl's folder, a
missing file) is one line naming the file and the key, not Hydra's report: `check_user_config`
composes the config once with Hydra's compose API before the run and words the first problem, and
`not_verl_lites` refuses a config that is not verl_lite's (verl's own ppo_trainer.yaml as the primary
config, from a --config-path that holds one). The same composition runs for verl_lite's own configs
whenever the command line sets values, so a value of the wrong type (`trainer.total_epochs=abc`,
null for a key that is not null-able, a value for a whole section) is one line with the fix there too.
"""

from __future__ import annotations

import argparse
import os
import re
import warnings
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.plugins import Plugins
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import DictConfig, OmegaConf

from verl_lite.config import keys
from verl_lite.config.schema import PPOTrainerConfig

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")
MAIN_DIR = str(
    Path(__file__).resolve().parents[1]
)  # main_ppo.py's: Hydra's base for a relative --config-path
VERL_SEARCHPATH = "verl/trainer/config"  # verl's recipes: hydra.searchpath: [file://verl/trainer/config]


class VerlLiteConf(SearchPathPlugin):
    """Puts verl_lite's conf/ on the search path of every composition (once)."""

    def manipulate_search_path(self, search_path) -> None:
        wanted = os.path.realpath(CONF_DIR)
        here = [os.path.realpath(p.path.removeprefix("file://")) for p in search_path.get_path()]
        if wanted not in here:
            search_path.append("verl_lite", f"file://{CONF_DIR}")


def _quiet_about_verls_folder() -> None:
    warnings.filterwarnings("ignore", message=rf".*path={re.escape(VERL_SEARCHPATH)} is not available")


def register() -> None:
    Plugins.instance().register(VerlLiteConf)
    _quiet_about_verls_folder()


def _args(argv: list[str]) -> argparse.Namespace:
    """Hydra's flags that choose the config (the rest is left to Hydra)."""
    parser = argparse.ArgumentParser(add_help=False)
    for flags in (("--config-path", "-cp"), ("--config-name", "-cn"), ("--config-dir", "-cd")):
        parser.add_argument(*flags)
    parser.add_argument("--multirun", "-m", action="store_true")
    parser.add_argument("--cfg", "-c")
    parser.add_argument("--package", "-p")
    parser.add_argument("--info", "-i", nargs="?")
    parser.add_argument("overrides", nargs="*")
    return parser.parse_known_args(argv)[0]


def config_dir(config_path: str) -> str:
    """Hydra's rule: an absolute --config-path, or one relative to main_ppo.py's folder."""
    return (
        config_path if os.path.isabs(config_path) else os.path.normpath(os.path.join(MAIN_DIR, config_path))
    )


def _file(folder: str, name: str) -> str:
    return os.path.join(folder, name if name.endswith(".yaml") else f"{name}.yaml")


def _defaults_cycle(folder: str, name: str) -> list[str] | None:
    """The files of `folder` whose defaults lists lead back to one of them (Hydra recurses forever)."""
    import yaml

    def defaults(file: str) -> list[str]:
        try:
            with open(_file(folder, file)) as f:
                content = yaml.safe_load(f)
        except (OSError, yaml.YAMLError):
            return []
        entries = content.get("defaults") if isinstance(content, dict) else None
        names = [e if isinstance(e, str) else next(iter(e.values()), None) for e in entries or []]
        return [n for n in names if isinstance(n, str) and os.path.isfile(_file(folder, n))]

    path, todo = [], [(name, 0)]
    while todo:  # depth-first, the path kept: a name met again on it closes a cycle
        file, depth = todo.pop()
        del path[depth:]
        if file in path:
            return path[path.index(file) :] + [file]
        path.append(file)
        todo += [(n, depth + 1) for n in reversed(defaults(file))]
    return None


def _yaml_line(error: Exception, source: str) -> str | None:
    """A YAML syntax error as one line: the file, the line and what is wrong there (a tab, mostly)."""
    text = " ".join(str(error).split())
    at = re.search(r'in "([^"]+)", line (\d+), column (\d+)', text)
    file, where = (at.group(1), f"line {at.group(2)}") if at else (source, "")
    if "'\\t'" in text or "\\t" in text:
        return f"{file}: {where} has a tab; YAML indents with spaces only"
    problem = getattr(error, "problem", None) or text
    return f"{file}: {where + ': ' if where else ''}{problem} (not valid YAML)"


def _line(error: Exception, folder: str, name: str) -> str:
    """Hydra's composition error as one line naming the file and the key."""
    if isinstance(error, RecursionError):
        cycle = _defaults_cycle(folder, name)
        chain = " -> ".join(os.path.basename(_file(folder, n)) for n in cycle) if cycle else "a file"
        return (
            f"{_file(folder, name)}: its defaults form a cycle ({chain}), which Hydra would follow forever; "
            "a file's defaults list ppo_trainer, other files of yours and _self_, never a file that lists it"
        )
    if type(error).__module__.startswith("yaml"):
        return _yaml_line(error, _file(folder, name))
    text = str(error)
    if error.__cause__ is not None:  # Hydra keeps OmegaConf's reason as the cause
        text = f"{text}\n{error.__cause__}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if text.startswith("Cannot find primary config"):
        return (
            f"--config-name={name}: no {os.path.basename(_file(folder, name))} in {folder} (--config-path is "
            "absolute or relative to verl_lite/main_ppo.py's folder); verl_lite's own configs are ppo_trainer and demo"
        )
    override = re.match(r"Error merging override (\S+)", lines[0])
    if override:  # a command-line value Hydra refuses (its type)
        return _override_line(override.group(1), lines[1] if len(lines) > 1 else "Hydra could not merge it")
    where = re.match(r"In '([^']+)': (.*)", lines[0])
    source = _file(folder, where.group(1)) if where else _file(folder, name)
    first = where.group(2) if where else lines[0]
    missing = re.match(r"Could not find '([^']+)'", first)
    if missing:
        return (
            f"{source}: its defaults name '{missing.group(1)}', which is not in {folder} or verl_lite's conf/ "
            "(verl's config groups are in verl_lite's ppo_trainer already): list only ppo_trainer, your own files "
            "and _self_"
        )
    full_key = next((line.removeprefix("full_key: ") for line in lines if line.startswith("full_key: ")), "")
    if first.startswith("ConfigKeyError") and full_key.endswith("._target_"):
        return (
            f"{source}: {full_key} is verl's dataclass for that section, which verl_lite's schema already is; "
            "remove the line"
        )
    if first.startswith("ConfigKeyError") and full_key:
        near = keys.nearest(full_key)
        hint = f"; did you mean {near}?" if near else ""
        return f"{source}: {full_key} is not a key of verl_lite's config (verl's ppo_trainer keys){hint}"
    detail = lines[1] if first.endswith("raised while composing config:") and len(lines) > 1 else first
    return f"{source}: {full_key + ': ' if full_key else ''}{detail}"


# Hydra's reasons for refusing a command-line value, and what to give instead
TYPE_FIXES = (
    ("could not be converted to Integer", "give it a whole number"),
    ("could not be converted to Float", "give it a number"),
    ("could not be converted to Boolean", "give it true or false"),
    ("is not a valid bool", "give it true or false"),
    ("is not Optional", "give it a value, or leave it out for its default"),
    ("is not a subclass of", "it is a section: set its keys ({key}.<name>=...), not the section"),
    ("Cannot merge DictConfig with", "it takes keys: set them one by one ({key}.<name>=...)"),
    ("does not support deletion", "a key of the config cannot be removed; set it instead ({key}=<value>)"),
)


def _override_line(line: str, reason: str) -> str:
    """One line for a command-line value of the wrong type: Hydra's reason and the fix."""
    key = line.partition("=")[0].lstrip("+~")
    fix = next((fix for known, fix in TYPE_FIXES if known in reason), None)
    return f"{line}: {reason}" + (f"; {fix.format(key=key)}" if fix else "")


def not_verl_lites(config: DictConfig, source: str = "the primary config") -> str | None:
    """One line when the composed config is not verl_lite's typed ppo_trainer."""
    if OmegaConf.get_type(config) is PPOTrainerConfig:
        return None
    return (
        f"{source} does not extend verl_lite's ppo_trainer (its folder holds a ppo_trainer.yaml of its own, "
        "e.g. verl's verl/trainer/config): keep your YAML in a folder of your own, with "
        "`defaults: [ppo_trainer, _self_]`"
    )


def _needs_check(args: argparse.Namespace) -> bool:
    """A config of the user's (--config-path), a name verl_lite's conf/ does not have, or values on
    the command line (Hydra's report of a value of the wrong type is seven lines)."""
    if args.multirun or args.cfg or args.info is not None or args.config_dir:
        return False  # sweeps, Hydra's own reports and extra folders: Hydra words those itself
    if args.config_path:
        return not args.config_path.startswith("pkg://")
    if args.config_name and not os.path.isfile(_file(CONF_DIR, args.config_name)):
        return True
    return any(
        "=" in o or o.startswith("~") for o in args.overrides
    )  # ~85 ms: one composition with Hydra's compose API


def check_user_config(argv: list[str]) -> str | None:
    """Compose the config `argv` names, as Hydra will; one line for the first problem, or None."""
    args = _args(argv)
    if not _needs_check(args):
        return None
    folder = config_dir(args.config_path) if args.config_path else CONF_DIR
    name = args.config_name or "ppo_trainer"
    overrides = [o for o in args.overrides if "=" in o or o.startswith("~")]
    GlobalHydra.instance().clear()
    try:
        with warnings.catch_warnings(), initialize_config_dir(config_dir=folder, version_base=None):
            _quiet_about_verls_folder()
            config = compose(name, overrides=overrides)
    except (Exception, RecursionError) as e:  # Hydra's composition errors, worded for the user
        return _line(e, folder, name)
    finally:
        GlobalHydra.instance().clear()
    if not config:  # an empty file composes to nothing, not even ppo_trainer
        return (
            f"{_file(folder, name)} is empty (or holds only comments): a config file starts with "
            "`defaults: [ppo_trainer, _self_]` and sets keys below it"
        )
    return not_verl_lites(config, _file(folder, name))
