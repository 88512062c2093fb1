"""Who writes the config: only config/ and the resolve steps (docs/design.md, "The config").

Start-up fills every derived value in a named resolve step (verl_lite/preflight.py RESOLVE_PHASES),
then checks the final values, then freezes the config for the workers. So no other code may write
to it, and this test reads every module of verl_lite/ to find what would: an assignment, augmented
assignment or `del` of an attribute or item of the config or of a section of it, `setattr` /
`delattr` / `object.__setattr__` on one, a mutating method (`append`, `update`, ...) of one of its
lists or dicts, and any call of `OmegaConf.update` or config/overrides.apply_to_config.

What counts as the config: a parameter named `cfg`, `config` or `*_cfg` / `*_config` (unless it is
annotated with a type that is not a schema class), a parameter annotated with a schema class,
`self.config` / `self.cfg`, and what is derived from those by attribute access, `getattr`, loops
over them, `self.<name> = <config>` in a class, or by passing them to a function of verl_lite (whose
parameter then holds the config too). A copy (`copy.deepcopy`, `dataclasses.replace`) is not the
config. After the freeze a write raises anyway (config/freeze.py); this test covers start-up.
"""

from __future__ import annotations

import ast
import functools
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "verl_lite"
CONFIG_NAMES = ("cfg", "config")
MUTATORS = {"append", "extend", "insert", "remove", "pop", "popitem", "clear", "sort", "reverse", "update", "setdefault"}  # fmt: skip
WRITER_CALLS = {("OmegaConf", "update"), (None, "apply_to_config")}  # (qualifier or None for any, name)


def schema_classes() -> set[str]:
    names = set()
    for path in ROOT.joinpath("config").glob("schema*.py"):
        names |= {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)}
    return names


SCHEMA = schema_classes()


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _parse(source: str) -> ast.Module:
    return ast.parse(source)  # shared between scans: the trees are only read


@dataclass
class Function:
    module: str
    qualname: str
    node: ast.FunctionDef | ast.AsyncFunctionDef
    cls: str | None  # the enclosing class's name, for self.method and self.<attr>
    params: list[str] = field(default_factory=list)  # positional order (self included)
    roots: set[str] = field(default_factory=set)  # names holding the config or a section of it

    @functools.cached_property
    def nodes(self) -> list[ast.AST]:
        return list(ast.walk(self.node))


class Package:
    """Every function of the given modules, indexed for resolving calls; the imports of each module."""

    def __init__(self, sources: dict[str, str]):
        self.trees = {m: _parse(s) for m, s in sources.items()}
        self.functions: dict[tuple[str, str], Function] = {}
        self.imports: dict[str, dict[str, str]] = {}  # module -> local name -> "module" or "module:name"
        self.class_attrs: dict[tuple[str, str], set[str]] = {}  # (module, class) -> self.<attr> roots
        for module, tree in self.trees.items():
            self.imports[module] = self._imports(tree)
            self._collect(module, tree.body, "", None)

    @staticmethod
    def _imports(tree: ast.Module) -> dict[str, str]:
        out = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    out[a.asname or a.name] = f"{node.module}:{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        return out

    def _collect(self, module: str, body: list, prefix: str, cls: str | None) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                self._collect(module, node.body, f"{prefix}{node.name}.", node.name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = [p.arg for p in (*a.posonlyargs, *a.args)]
                fn = Function(module, prefix + node.name, node, cls, params)
                for p in (*a.posonlyargs, *a.args, *a.kwonlyargs):
                    if holds_config(p):
                        fn.roots.add(p.arg)
                self.functions[(module, fn.qualname)] = fn
                self._collect(module, node.body, f"{prefix}{node.name}.", cls)

    def callee(self, fn: Function, call: ast.Call) -> tuple[Function | None, int]:
        """The function a call runs, if it is one of ours, and how many leading params the call skips."""
        f, mod = call.func, fn.module
        if isinstance(f, ast.Name):
            target = self.functions.get((mod, f.id)) or self.functions.get((mod, f"{f.id}.__init__"))
            if target is None and f.id in self.imports[mod]:
                target = self._imported(self.imports[mod][f.id])
            if target is not None:
                return target, int(target.qualname.endswith(".__init__"))
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            if f.value.id == "self" and fn.cls:
                return self.functions.get((mod, f"{fn.cls}.{f.attr}")) or self._method(f.attr), 1
            ref = self.imports[mod].get(f.value.id)
            if ref is not None:
                return self._imported(f"{ref.replace(':', '.')}:{f.attr}"), 0
        return None, 0

    def _imported(self, ref: str) -> Function | None:
        module, _, name = ref.partition(":")
        return self.functions.get((module, name)) or self.functions.get((module, f"{name}.__init__"))

    def _method(self, name: str) -> Function | None:
        """self.<name> of a mixin: the one method of that name in the package, if only one."""
        found = [f for (m, q), f in self.functions.items() if q.count(".") == 1 and q.endswith(f".{name}")]
        return found[0] if len(found) == 1 else None


def _names(annotation: ast.AST | None) -> set[str]:
    """The type names an annotation mentions (`a.B` gives B; a string annotation is split on |)."""
    if annotation is None:
        return set()
    if isinstance(annotation, ast.Constant):
        return {w.split(".")[-1] for w in str(annotation.value).replace("|", " ").split()}
    return {
        n.id if isinstance(n, ast.Name) else n.attr
        for n in ast.walk(annotation)
        if isinstance(n, (ast.Name, ast.Attribute))
    }


def holds_config(param: ast.arg) -> bool:
    names = _names(param.annotation)
    if names & SCHEMA:
        return True
    named = param.arg in CONFIG_NAMES or param.arg.endswith(("_cfg", "_config"))
    return named and not names


def _root_name(expr: ast.AST) -> ast.AST:
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        expr = expr.value
    return expr


class Scan:
    """Roots propagated to a fixpoint over the package, then the writes outside `allowed`."""

    def __init__(self, package: Package):
        self.pkg = package
        changed = True
        while changed:
            changed = False
            for fn in package.functions.values():
                changed |= self._propagate(fn)

    def holds(self, fn: Function, expr: ast.AST) -> bool:
        """Whether `expr` is the config or part of it, in `fn`."""
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr":
            return bool(expr.args) and self.holds(fn, expr.args[0])
        if isinstance(expr, ast.Call):  # one of ours that returns a config (config/compose.load_config)
            target, _ = self.pkg.callee(fn, expr)
            returns = target.node.returns if target is not None else None
            return returns is not None and bool(_names(returns) & SCHEMA)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
            attrs = self.pkg.class_attrs.get((fn.module, fn.cls or ""), set())
            return expr.attr in CONFIG_NAMES or expr.attr in attrs
        if isinstance(expr, (ast.Attribute, ast.Subscript)):
            return self.holds(fn, expr.value)
        return isinstance(expr, ast.Name) and expr.id in fn.roots

    def _bind(self, fn: Function, target: ast.AST) -> bool:
        if isinstance(target, ast.Name) and target.id not in fn.roots:
            fn.roots.add(target.id)
            return True
        if isinstance(target, (ast.Tuple, ast.List)):
            return any([self._bind(fn, t) for t in target.elts])
        if (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
        ):
            attrs = self.pkg.class_attrs.setdefault((fn.module, fn.cls or ""), set())
            if target.attr not in attrs:
                attrs.add(target.attr)
                return True
        return False

    def _assign(self, fn: Function, target: ast.AST, value: ast.AST) -> bool:
        """`a, b = x, y` binds pairwise; otherwise the target holds the config if the value does."""
        pairs = isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
        if pairs and len(target.elts) == len(value.elts):
            return any([self._assign(fn, t, v) for t, v in zip(target.elts, value.elts)])
        return self.holds(fn, value) and self._bind(fn, target)

    def _propagate(self, fn: Function) -> bool:
        changed = False
        for node in fn.nodes:
            if isinstance(node, ast.Assign):
                changed |= any([self._assign(fn, t, node.value) for t in node.targets])
            elif isinstance(node, (ast.For, ast.comprehension)) and self._mentions(fn, node.iter):
                changed |= self._bind(fn, node.target)
            elif isinstance(node, (ast.With,)):
                for item in node.items:
                    if item.optional_vars is not None and self.holds(fn, item.context_expr):
                        changed |= self._bind(fn, item.optional_vars)
            elif isinstance(node, ast.Call):
                changed |= self._pass_on(fn, node)
        return changed

    def _mentions(self, fn: Function, expr: ast.AST) -> bool:
        return any(self.holds(fn, e) for e in ast.walk(expr) if isinstance(e, (ast.Name, ast.Attribute)))

    def _pass_on(self, fn: Function, call: ast.Call) -> bool:
        """A config passed to one of our functions: the parameter that receives it holds it too."""
        target, skip = self.pkg.callee(fn, call)
        if target is None or target.module.startswith("verl_lite.config"):
            return False
        received = [
            target.params[skip + i]
            for i, arg in enumerate(call.args)
            if skip + i < len(target.params) and not isinstance(arg, ast.Starred) and self.holds(fn, arg)
        ]
        received += [k.arg for k in call.keywords if k.arg and self.holds(fn, k.value)]
        new = set(received) - target.roots
        target.roots |= new
        return bool(new)

    def writes(self, fn: Function) -> list[ast.AST]:
        """The statements and calls of `fn` (not of functions nested in it) that write to the config."""
        found = []
        for node in _own_nodes(fn.node):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, ast.Delete):
                targets = node.targets
            if any(
                isinstance(t, (ast.Attribute, ast.Subscript)) and self._writes_into(fn, t) for t in targets
            ):
                found.append(node)
            if isinstance(node, ast.Call) and self._writing_call(fn, node):
                found.append(node)
        return found

    def _writes_into(self, fn: Function, target: ast.AST) -> bool:
        """`x.a = ...` / `x[k] = ...` with x the config; not `self.config = config` (binding the name)."""
        if (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
        ):
            return False
        return self.holds(fn, target.value)

    def _writing_call(self, fn: Function, call: ast.Call) -> bool:
        f = call.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        qualifier = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else None
        if (qualifier, name) in WRITER_CALLS or (None, name) in WRITER_CALLS:
            return True
        if name in ("setattr", "delattr", "__setattr__", "__delattr__") and call.args:
            return self.holds(fn, call.args[0])
        return isinstance(f, ast.Attribute) and name in MUTATORS and self.holds(fn, f.value)


def _own_nodes(fn: ast.AST):
    """The nodes of a function's body, not descending into nested functions or classes."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def package_sources() -> dict[str, str]:
    return {module_name(p): p.read_text() for p in sorted(ROOT.rglob("*.py"))}


def resolve_steps() -> set[tuple[str, str]]:
    """(module, qualname) of every registered resolve step: the only writers outside config/."""
    from verl_lite import preflight

    return {(s.fn.__module__, s.fn.__qualname__) for phase in preflight.RESOLVE_PHASES for s in phase}


def config_writes(sources: dict[str, str], allowed: set[tuple[str, str]]) -> list[str]:
    """'module:line qualname: statement' for each write to the config outside config/ and `allowed`."""
    pkg = Package(sources)
    scan = Scan(pkg)
    out = []
    for (module, qualname), fn in sorted(pkg.functions.items()):
        if module.startswith("verl_lite.config") or (module, qualname) in allowed:
            continue
        for node in scan.writes(fn):
            out.append(f"{module}:{node.lineno} {qualname}: {ast.unparse(node).splitlines()[0]}")
    return out


# --- the rule -------------------------------------------------------------------------------------


def test_only_config_and_the_resolve_steps_write_to_the_config():
    bad = config_writes(package_sources(), resolve_steps())
    assert not bad, "the config is written outside config/ and the resolve steps:\n" + "\n".join(bad)


def test_the_resolve_steps_are_what_writes_and_the_scan_sees_them():
    """Without the allowlist, the writes found are exactly inside the registered resolve steps outside
    config/: the scan sees the real writes (aliases, apply_to_config), and each such step writes."""
    steps = {(m, q) for m, q in resolve_steps() if not m.startswith("verl_lite.config")}  # config/ may write
    found = config_writes(package_sources(), set())
    writers = {(line.split(":")[0], line.split(" ")[1].rstrip(":")) for line in found}
    assert writers == steps, found


# Writes planted in ppo_trainer.py, one method of RayPPOTrainer per kind (the helper is a module
# function the method passes a section to): each must be refused, in the function that writes.
PLANTED = {
    "attribute": "self.config.trainer.total_epochs = 1",
    "alias": "r = self.config.actor_rollout_ref.rollout\nr.n = 2",
    "augmented": "self.config.trainer.total_epochs += 1",
    "item": "self.config.data.train_files[0] = 'x'",
    "delete": "del self.config.trainer.total_epochs",
    "setattr": "setattr(self.config.trainer, 'total_epochs', 1)",
    "getattr alias": "section = getattr(self.config.actor_rollout_ref, 'actor')\nsection.ppo_epochs = 3",
    "loop alias": "for fsdp in (self.config.critic.model.fsdp_config,):\n    fsdp.param_offload = True",
    "list method": "self.config.trainer.logger.append('wandb')",
    "OmegaConf.update": "OmegaConf.update(conf, 'trainer.total_epochs', 1)",
    "apply_to_config": "apply_to_config(self.config, {'trainer.total_epochs': 1})",
    "through a helper": "_planted_helper(self.config.trainer)",
}
HELPER = "def _planted_helper(section):\n    section.total_epochs = 1\n"


def _planted_trainer(source: str) -> str:
    """ppo_trainer.py with a method `planted_<i>(self, conf)` per PLANTED body, and the helper."""
    tree = ast.parse(source)
    trainer = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RayPPOTrainer")
    lines = source.splitlines()
    methods = []
    for i, body in enumerate(PLANTED.values()):
        methods += ["", f"    def planted_{i}(self, conf):", textwrap.indent(body, " " * 8)]
    return "\n".join(lines[: trainer.end_lineno] + methods + lines[trainer.end_lineno :]) + "\n\n" + HELPER


def test_a_planted_write_of_each_kind_is_refused():
    module = "verl_lite.trainer.ppo_trainer"
    sources = package_sources()
    found = config_writes({**sources, module: _planted_trainer(sources[module])}, resolve_steps())
    writers = {line.split(" ")[1].rstrip(":") for line in found if line.startswith(module)}
    kinds = list(PLANTED)
    want = {f"RayPPOTrainer.planted_{i}": kind for i, kind in enumerate(kinds[:-1])}
    want["_planted_helper"] = kinds[-1]  # the write is the helper's; the method only passes the section
    missed = [kind for name, kind in want.items() if name not in writers]
    assert not missed and writers == set(want), f"planted writes not refused: {missed}; found: {found}"


def test_a_planted_write_is_allowed_only_inside_a_registered_resolve_step():
    """The same write passes inside a resolve step and fails in an unregistered function beside it."""
    sources = package_sources()
    module, step = min((m, q) for m, q in resolve_steps() if not m.startswith("verl_lite.config"))
    tree = ast.parse(sources[module])
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == step.split(".")[-1])
    lines = sources[module].splitlines()
    indent = " " * (fn.body[0].col_offset)
    write = f"{indent}{fn.args.args[0].arg}.trainer.total_epochs = 1"
    inside = "\n".join(lines[: fn.body[0].lineno - 1] + [write] + lines[fn.body[0].lineno - 1 :])
    assert config_writes({**sources, module: inside}, resolve_steps()) == []
    beside = sources[module] + "\n\ndef unregistered(cfg):\n    cfg.trainer.total_epochs = 1\n"
    (found,) = config_writes({**sources, module: beside}, resolve_steps())
    assert found.startswith(module) and "unregistered: cfg.trainer.total_epochs = 1" in found
