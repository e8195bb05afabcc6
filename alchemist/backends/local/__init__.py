"""The local backend: a job is a detached process group on this machine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from alchemist._lazy import lazy_exports

if TYPE_CHECKING:
    from alchemist.backends.local.backend import LocalBackend

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "LocalBackend": "alchemist.backends.local.backend",
    },
)


__all__ = ["LocalBackend"]
