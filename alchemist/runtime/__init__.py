"""What user code calls, in a job and in a plain notebook (world size 1).

``python -m alchemist.runtime JOB_DIR`` is the worker entry point that each rank runs
under torchrun (see :mod:`alchemist.runtime.worker`).
"""

from alchemist.runtime.context import Context, context
from alchemist.runtime.helpers import (
    distribute,
    log,
    per_worker_batch,
    restart_count,
    restore,
    save_checkpoint,
    shard,
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
