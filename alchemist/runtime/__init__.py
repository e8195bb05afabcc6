"""What user code calls, in a job and in a plain notebook (world size 1).

``python -m alchemist.runtime JOB_DIR`` is the worker entry point that each rank runs
under torchrun (see :mod:`alchemist.runtime.worker`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alchemist._lazy import lazy_exports

# Loaded at once: the function `context` has the name of its module, which an import of
# the module would otherwise put in its place (and context.py loads only alchemist.job).
from alchemist.runtime.context import Context, context

if TYPE_CHECKING:
    from alchemist.runtime.helpers import (
        distribute,
        log,
        per_worker_batch,
        restart_count,
        restore,
        save_checkpoint,
        shard,
    )

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "distribute": "alchemist.runtime.helpers",
        "log": "alchemist.runtime.helpers",
        "per_worker_batch": "alchemist.runtime.helpers",
        "restart_count": "alchemist.runtime.helpers",
        "restore": "alchemist.runtime.helpers",
        "save_checkpoint": "alchemist.runtime.helpers",
        "shard": "alchemist.runtime.helpers",
    },
)


__all__ = [
    "Context",
    "context",
    "distribute",
    "log",
    "per_worker_batch",
    "restart_count",
    "restore",
    "save_checkpoint",
    "shard",
]
