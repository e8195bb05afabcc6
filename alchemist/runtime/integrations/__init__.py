"""The training libraries people already use, run as they are inside a job.

The worker calls :func:`install` before it runs the cell. Nothing is imported here:
each library is patched only once the cell imports it (a post-import hook on
``sys.meta_path``), so a job that does not use a library pays nothing for it, and
``alchemist`` imports without any of them installed.

What each hook does, in a job only (a plain notebook is left alone):

- ``lightning`` / ``pytorch_lightning``: :mod:`alchemist.runtime.integrations.lightning`
  (the ranks are torchrun's, which Lightning detects as ``TorchElasticEnvironment``;
  ``devices="auto"`` becomes the job's ranks; ``logger`` gains an
  :class:`~alchemist.runtime.integrations.lightning.AlchemistLogger`; a strategy that starts its
  own processes is refused in one line).
- ``transformers``: :mod:`alchemist.runtime.integrations.transformers` (every ``Trainer`` gets an
  :class:`~alchemist.runtime.integrations.transformers.AlchemistCallback`).
- ``accelerate``: :mod:`alchemist.runtime.integrations.accelerate` (``Accelerator.log`` also goes
  to ``alchemist.log``; ``notebook_launcher`` is refused in one line).
- ``torch.distributed.init_process_group``: :mod:`alchemist.runtime.integrations.torchrun`
  (the job's group is already made; a script's own call returns it).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

Hook = Callable[[ModuleType], None]


class _HookedLoader(importlib.abc.Loader):
    """A module's own loader, then the hook on the module it made."""

    def __init__(self, loader: Any, hook: Hook) -> None:
        self._loader = loader
        self._hook = hook

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        result: ModuleType | None = self._loader.create_module(spec)
        return result

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._hook(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, ...
        return getattr(self._loader, name)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``hooks[name](module)`` right after module ``name`` is first imported."""

    def __init__(self, hooks: dict[str, Hook]) -> None:
        self.hooks = dict(hooks)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        hook = self.hooks.get(fullname)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _HookedLoader(spec.loader, hook)
        return spec


def _lazy(module: str, function: str) -> Hook:
    def run(target: ModuleType) -> None:
        getattr(importlib.import_module(module), function)(target)

    return run


#: module imported by the cell -> what patches it (module, function in this package).
HOOKS: dict[str, Hook] = {
    "lightning.pytorch.trainer.trainer": _lazy("alchemist.runtime.integrations.lightning", "patch"),
    "pytorch_lightning.trainer.trainer": _lazy("alchemist.runtime.integrations.lightning", "patch"),
    "transformers.trainer": _lazy("alchemist.runtime.integrations.transformers", "patch"),
    "accelerate.accelerator": _lazy(
        "alchemist.runtime.integrations.accelerate", "patch_accelerator"
    ),
    "accelerate.launchers": _lazy("alchemist.runtime.integrations.accelerate", "patch_launchers"),
}

_installed: _AfterImport | None = None


def install() -> None:
    """Patch each library when (and if) the job's code imports it; idempotent.

    A library already imported (a warm rank's zygote never preloads these, but a
    ``ALCHEMIST_POOL_PRELOAD`` could) is patched at once.
    """
    global _installed
    from alchemist.runtime.integrations import torchrun

    torchrun.install()
    if _installed is not None:
        return
    _installed = _AfterImport(HOOKS)
    sys.meta_path.insert(0, _installed)
    for name, hook in HOOKS.items():
        if name in sys.modules:
            hook(sys.modules[name])
