"""Hugging Face Accelerate in a job.

An Accelerate script runs on a job's ranks as it runs under ``accelerate launch`` or
torchrun: ``Accelerator()`` reads torchrun's variables and joins the process group the
worker already made. In a job:

- ``accelerator.log(values, step=...)`` also goes to ``alchemist.log`` (the monitor's
  curves, under the names logged), whatever trackers ``log_with`` names, on every rank;
- ``notebook_launcher(...)`` is refused in one line: it would start a second set of
  processes inside each rank; call the training function itself instead.
"""

from __future__ import annotations

import itertools
from types import ModuleType
from typing import Any

from alchemist.errors import IntegrationError
from alchemist.runtime.integrations import _common

_auto_steps = itertools.count()


def patch_accelerator(module: ModuleType) -> None:
    """Wrap ``accelerate.accelerator.Accelerator.log`` to forward to ``alchemist.log``."""
    cls = getattr(module, "Accelerator", None)
    if cls is None:
        return

    def make(original: Any) -> Any:
        def log(
            self: Any, values: dict[str, Any], step: int | None = None, *a: Any, **kw: Any
        ) -> Any:
            if _common.in_job():
                _common.forward(next(_auto_steps) if step is None else step, dict(values))
            return original(self, values, step, *a, **kw)

        return log

    _common.wrap_method(cls, "log", make)


def _refuse_notebook_launcher(function: Any, args: tuple[Any, ...] = (), *a: Any, **kw: Any) -> Any:
    name = getattr(function, "__name__", "function")
    raise IntegrationError(
        f"notebook_launcher({name}, ...) starts its own processes, but this job's"
        f" {_common.world_size()} ranks are already running: call {name}(*args) in the"
        " cell instead (each rank runs it)"
    )


def patch_launchers(module: ModuleType) -> None:
    """In a job, ``accelerate.notebook_launcher`` (and ``debug_launcher``) refuse in one line."""
    if not _common.in_job() or getattr(module, "_alchemist", False):
        return
    original = getattr(module, "notebook_launcher")  # noqa: B009

    def notebook_launcher(function: Any, args: tuple[Any, ...] = (), *a: Any, **kw: Any) -> Any:
        return _refuse_notebook_launcher(function, args, *a, **kw)

    notebook_launcher.__wrapped__ = original  # type: ignore[attr-defined]
    notebook_launcher.__doc__ = original.__doc__
    setattr(module, "notebook_launcher", notebook_launcher)  # noqa: B010 - mypy: a module
    setattr(module, "_alchemist", True)  # noqa: B010
