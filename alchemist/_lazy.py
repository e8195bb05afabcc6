"""Package roots that load their exports on first use (PEP 562).

A package's ``__init__`` names what it exports and where each lives; nothing is imported
until asked, so ``import alchemist.job.jobdir`` (the launcher, the hub, a rank) loads
that module and not every sibling of every package above it. Each root also imports the
same names under ``TYPE_CHECKING``, for mypy and readers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    module_globals: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the package whose ``globals()`` is
    ``module_globals``: ``exports`` maps each exported name to the module that defines
    it (a name that is itself a submodule maps to that submodule's full name)::

        __getattr__, __dir__ = lazy_exports(globals(), {"JobSpec": "alchemist.job.spec"})
    """
    package = module_globals["__name__"]

    def __getattr__(name: str) -> Any:
        source = exports.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(source)
        value = module if source == f"{package}.{name}" else getattr(module, name)
        module_globals[name] = value  # once loaded, a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(module_globals) | set(exports))

    return __getattr__, __dir__
