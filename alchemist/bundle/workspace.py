"""The user's own code that travels with a cell: modules beside the notebook.

A notebook that does ``from model import GPT`` (a ``model.py`` in its folder) needs
``model`` on every worker: cloudpickle sends ``GPT`` by reference, and the cell may
import it itself. Modules and packages that live outside the Python environment (not
in the standard library, not in site-packages, not an installed distribution) are the
user's own: their files are copied into the bundle (``bundle/files/``), which is on
every backend's shared storage, and the worker puts that folder first on ``sys.path``
before it unpickles anything. The job then runs the code as it was at submission,
whatever the user edits afterwards.
"""

from __future__ import annotations

import ast
import importlib.machinery
import site
import sys
import sysconfig
import types
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from alchemist.errors import BundleError

#: Folders and files that never travel with a package.
_SKIP_NAMES = {"__pycache__", ".git", ".ipynb_checkpoints", ".mypy_cache", ".pytest_cache"}


@lru_cache(maxsize=1)
def _environment_dirs() -> tuple[Path, ...]:
    """Where the interpreter's own and installed packages live."""
    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    paths.add(site.getusersitepackages())
    return tuple(Path(p).resolve() for p in paths if p)


@lru_cache(maxsize=1)
def _installed_top_levels() -> frozenset[str]:
    """Top-level import names that an installed distribution provides (editable too)."""
    from importlib.metadata import packages_distributions

    return frozenset(packages_distributions()) | {"alchemist"}


def imported_top_levels(source: str) -> set[str]:
    """Top-level names of the absolute imports in ``source`` (``import a.b`` gives ``a``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def referenced_top_levels(values: Iterable[Any], modules: Iterable[str]) -> set[str]:
    """Top-level modules that shipped values refer to by reference (their classes,
    functions and types), plus the modules the cell uses as imports."""
    names = {m.split(".")[0] for m in modules}
    for value in values:
        for obj in (value, type(value)):
            module = getattr(obj, "__module__", None)
            if isinstance(module, str) and module not in ("__main__", "builtins"):
                names.add(module.split(".")[0])
    return names


def _origin(name: str, search: list[str]) -> Path | None:
    """The file or package folder that ``import name`` would load, without importing it."""
    module = sys.modules.get(name)
    if isinstance(module, types.ModuleType):
        file = getattr(module, "__file__", None)
        if not file:
            return None
        path = Path(file)
        return path.parent if path.name == "__init__.py" else path
    spec = importlib.machinery.PathFinder.find_spec(name, search)
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    path = Path(spec.origin)
    return path.parent if spec.submodule_search_locations else path


def _is_users(name: str, path: Path) -> bool:
    if name in _installed_top_levels() or name in sys.stdlib_module_names:
        return False
    if path.suffix not in ("", ".py"):
        return False  # a compiled extension belongs to an environment, not a workspace
    real = path.resolve()
    return not any(real == d or d in real.parents for d in _environment_dirs())


def _files_of(name: str, path: Path) -> dict[str, bytes]:
    if path.is_file():
        return {path.name: path.read_bytes()}
    out: dict[str, bytes] = {}
    for file in sorted(path.rglob("*")):
        rel = file.relative_to(path.parent)
        if any(part in _SKIP_NAMES or part.startswith(".") for part in rel.parts):
            continue
        if file.is_file() and file.suffix != ".pyc":
            out[rel.as_posix()] = file.read_bytes()
    return out


def workspace_files(
    names: Iterable[str], cwd: str, *, max_bytes: int
) -> tuple[dict[str, bytes], dict[str, str]]:
    """The user's own modules among ``names``, as files to ship.

    Args:
        names: top-level module names the cell needs.
        cwd: the notebook's (or script's) folder; searched first, as Python does for a
            script, since a kernel started there finds its modules there.
        max_bytes: the most all shipped files may weigh together.

    Returns:
        ``(files, origins)``: relative path → contents, and module → where it came from.

    Raises:
        BundleError: the modules weigh more than ``max_bytes`` (naming the biggest).
    """
    search = [cwd, *sys.path]
    files: dict[str, bytes] = {}
    origins: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for name in sorted(set(names)):
        path = _origin(name, search)
        if path is None or not path.exists() or not _is_users(name, path):
            continue
        found = _files_of(name, path)
        files.update(found)
        origins[name] = str(path)
        sizes[name] = sum(len(b) for b in found.values())
    total = sum(sizes.values())
    if total > max_bytes:
        biggest = max(sizes, key=lambda n: sizes[n])
        raise BundleError(
            f"the notebook's own modules weigh {total / 2**20:.1f} MB ({biggest!r}"
            f" {sizes[biggest] / 2**20:.1f} MB), over the {max_bytes / 2**20:.0f} MB limit"
            f" for code shipped with a cell: keep data files out of {origins[biggest]}, or"
            " install the package in the worker environment (nothing was submitted)"
        )
    return files, origins
