"""Promoting a notebook cell: what the workers need to run it.

:func:`build_bundle` finds the cell's free names, resolves each in the notebook's
namespace and decides how it travels:

- a module travels as an import (``import numpy as np``);
- a function or class defined in the notebook travels by value (cloudpickle);
- any other value travels by value with cloudpickle, if it is small enough;
- the notebook's own modules (``model.py`` beside it) travel as files
  (:mod:`alchemist.bundle.workspace`).

:func:`write_bundle` stores it in the job directory (``bundle/``) with a content hash;
:func:`load_bundle` rebuilds the namespace in a worker. Every problem a user can fix is
a :class:`~alchemist.errors.BundleError` with one line naming the variable and the fix,
raised before anything is submitted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alchemist._lazy import lazy_exports

if TYPE_CHECKING:
    from alchemist.bundle.builder import Bundle, BundleItem, build_bundle, source_of
    from alchemist.bundle.freenames import free_names
    from alchemist.bundle.store import enter_workspace, load_bundle, read_manifest, write_bundle

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "Bundle": "alchemist.bundle.builder",
        "BundleItem": "alchemist.bundle.builder",
        "build_bundle": "alchemist.bundle.builder",
        "source_of": "alchemist.bundle.builder",
        "free_names": "alchemist.bundle.freenames",
        "enter_workspace": "alchemist.bundle.store",
        "load_bundle": "alchemist.bundle.store",
        "read_manifest": "alchemist.bundle.store",
        "write_bundle": "alchemist.bundle.store",
    },
)


__all__ = [
    "Bundle",
    "BundleItem",
    "build_bundle",
    "enter_workspace",
    "free_names",
    "load_bundle",
    "read_manifest",
    "source_of",
    "write_bundle",
]
