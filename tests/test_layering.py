"""The one-way import rules of docs/design.md ("Layers"), read from the source of every module.

An import inside `if TYPE_CHECKING:` is a type hint only and does not count. A new top-level module
or package must be added to ALLOWED (with what it may import) for this test to pass.
"""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "verl_lite"

# unit (a package under verl_lite/, or a top-level module) -> the other units it may import
BELOW_PREFLIGHT = {
    "config", "algos", "utils", "protocol", "engine", "rollout", "data", "reward",
    "single_controller", "roles", "workers", "planner", "trainer", "errors",
    "tools", "interactions", "agent_loop",
}  # fmt: skip
ALLOWED: dict[str, set[str]] = {
    "config": set(),  # the bottom layer: composed, checked and frozen before anything it configures
    "algos": {"config"},  # pure tensor math (its choice sets are the config's)
    "utils": set(),
    "errors": set(),  # RunError: any unit above the bottom may raise it
    "protocol": set(),
    "engine": {"config", "algos", "utils"},  # tensors in and out: never DataProto, workers or the trainer
    "rollout": {"config", "engine", "utils"},
    "data": {"config", "protocol", "utils"},
    "reward": {"config", "algos", "protocol", "utils", "errors"},
    "single_controller": {"protocol", "utils"},
    "roles": {"config", "algos", "utils"},
    "tools": {"reward", "utils"},  # verl's tool contract; the GSM8K tool scores with reward/
    "interactions": {"reward", "utils"},
    "agent_loop": {
        "rollout",
        "tools",
        "interactions",
        "protocol",
        "utils",
        "data",
        "config",
    },  # multi-turn, token-in/out
    "workers": {
        "config",
        "algos",
        "engine",
        "rollout",
        "protocol",
        "single_controller",
        "utils",
        "data",
        "agent_loop",
    },  # fmt: skip
    # verl's module paths (verl.tools.base_tool, ...): re-exports of the units that implement them
    "compat": {"tools", "interactions", "agent_loop", "reward", "utils"},
    "planner": {"config", "data", "engine", "rollout", "utils", "roles"},  # the memory model, and its CLI
    "trainer": BELOW_PREFLIGHT - {"trainer"},
    # start-up's first phase, light (no torch): the placeholder paths and the values' domains
    "preflight_early": {"config", "roles", "utils"},
    "preflight": BELOW_PREFLIGHT | {"preflight_early"},  # registers every component's start-up step
    "main_ppo": BELOW_PREFLIGHT | {"preflight", "preflight_early"},
    "doctor": {"config", "utils", "rollout", "engine", "data"},
    "model_merger": {"config", "engine", "utils"},
}
BOTTOM = {"config", "algos", "utils", "protocol", "errors"}
for _unit in set(ALLOWED) - BOTTOM:  # errors.py (InputError, RunError): raised anywhere above the bottom
    ALLOWED[_unit] = ALLOWED[_unit] | {"errors"}
STDLIB = set(sys.stdlib_module_names)


def _units() -> dict[str, list[Path]]:
    units: dict[str, list[Path]] = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).parts
        name = rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")
        if name != "__init__":
            units.setdefault(name, []).append(path)
    return units


def _imports(path: Path) -> list[str]:
    """Absolute module names imported at run time (not under `if TYPE_CHECKING:`)."""
    tree = ast.parse(path.read_text())
    hints = {
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for sub in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in hints:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += (
                [node.module] if node.module != "verl_lite" else [f"verl_lite.{a.name}" for a in node.names]
            )
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names]
    return found


UNITS = _units()


def test_every_unit_has_its_rule():
    assert sorted(UNITS) == sorted(ALLOWED), (
        "add the new module or package to ALLOWED with what it may import"
    )


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_imports_go_one_way(unit):
    bad = []
    for path in UNITS[unit]:
        for module in _imports(path):
            parts = module.split(".")
            if (
                parts[0] == "verl_lite"
                and len(parts) > 1
                and parts[1] != unit
                and parts[1] not in ALLOWED[unit]
            ):
                bad.append(f"{path.relative_to(ROOT.parent)} imports {module}")
    assert not bad, "\n".join(bad)


def test_the_schema_imports_only_the_standard_library():
    """The GPU machine runs engine tests with the schema and without Hydra or OmegaConf."""
    bad = []
    for path in [
        *ROOT.joinpath("config").glob("schema*.py"),
        *(ROOT / "config" / f for f in ("freeze.py", "gates.py")),
    ]:
        for module in _imports(path):
            top = module.split(".")[0]
            if top not in STDLIB and not module.startswith(
                (
                    "verl_lite.config.schema",
                    "verl_lite.config.freeze",
                    "verl_lite.config.fields",
                    "verl_lite.config.gates",
                )
            ):
                bad.append(f"{path.name} imports {module}")
    assert not bad, "\n".join(bad)


def test_the_rules_can_fail():
    """The parser sees real imports: the trainer imports the config, and config imports nothing above."""
    trainer = {m for p in UNITS["trainer"] for m in _imports(p)}
    assert any(m.startswith("verl_lite.config") for m in trainer)
    assert "verl_lite.config" not in ALLOWED["config"] and "trainer" not in ALLOWED["engine"]
