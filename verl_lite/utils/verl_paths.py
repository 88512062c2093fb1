"""verl's import paths, for a user's file written for verl, where verl is not installed.

A reward, tool, interaction or agent-loop file written for verl imports from verl
(`from verl.utils.reward_score import gsm8k`, `from verl.tools.base_tool import BaseTool`, ...).
`install()` (run when verl_lite is imported) puts a finder first on sys.meta_path that answers
`import verl...` from the tree under verl_lite/compat/verl/ (one module per verl module, re-exporting
verl_lite's class or function of that name). Where a real verl can be imported the finder steps
aside: verl's classes are then used as they are, never shadowed.

`verl.X.Y` is answered with the module `verl_lite.compat.verl.X.Y` itself (one module object under
both names), so a class imported by either path is the same class: a user's tool subclassing
`verl.tools.base_tool.BaseTool` is a verl_lite BaseTool. The finder stands first on sys.meta_path,
so the regular path finder never loads a compat file a second time under verl's name.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys

PREFIX = "verl_lite.compat."


def _real_verl_spec():
    """A spec for the top-level `verl` from any finder but ours (a verl installed or on the path)."""
    for finder in sys.meta_path:
        if isinstance(finder, VerlFinder) or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec("verl", None)
        if spec is not None and spec.origin is not None:  # not a bare directory named verl (namespace)
            return spec
    return None


def verl_installed() -> bool:
    module = sys.modules.get("verl")
    if module is not None:
        return not getattr(module, "__name__", "").startswith(PREFIX)
    return _real_verl_spec() is not None


class _Alias(importlib.abc.Loader):
    """Loads `verl.X` as the already-imported `verl_lite.compat.verl.X`."""

    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module):
        pass  # imported whole by create_module


class VerlFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != "verl" and not fullname.startswith("verl."):
            return None
        if verl_installed():
            return None
        alias = PREFIX + fullname
        try:
            found = importlib.util.find_spec(alias)
        except ModuleNotFoundError:
            found = None
        if found is None:
            return None  # -> ModuleNotFoundError("No module named 'verl.x'"); missing_verl_module says why
        return importlib.machinery.ModuleSpec(
            fullname, _Alias(alias), is_package=found.submodule_search_locations is not None
        )


def install() -> None:
    """Put the finder first on sys.meta_path (once)."""
    if not any(isinstance(f, VerlFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, VerlFinder())


def provided() -> list[str]:
    """The verl modules verl_lite provides, by verl's names (read from the files: nothing imported)."""
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "compat", "verl")
    names = []
    for folder, _, files in os.walk(root):
        package = ".".join(["verl", *os.path.relpath(folder, root).split(os.sep)]).removesuffix(".")
        for file in files:
            if file.endswith(".py") and file != "__init__.py":
                names.append(f"{package}.{file[:-3]}")
    return sorted(names)


def missing_verl_module(error: BaseException) -> str | None:
    """For an import from verl that verl_lite does not answer (and verl not installed), what to do
    instead of "put its package on PYTHONPATH": a module (`import verl.x.y`) or a name in one
    (`from verl.x import y`). None for any other error."""
    name = (getattr(error, "name", None) or "").removeprefix(PREFIX)  # a name's module is compat's
    if not isinstance(error, ImportError) or not (name == "verl" or name.startswith("verl.")):
        return None
    if verl_installed():
        return None
    if not isinstance(error, ModuleNotFoundError):
        found = re.search(r"cannot import name '([^']+)'", str(error))
        name = f"{name}.{found.group(1)}" if found else name
    return (
        f"verl is not installed and verl_lite does not provide {name!r}: verl_lite answers verl's imports for "
        f"{', '.join(provided())}; import from one of those, or install verl (then its own modules are used)"
    )
