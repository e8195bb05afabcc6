"""Alchemist: easy, fast, scalable distributed training from a Jupyter notebook.

In a notebook::

    %load_ext alchemist

    %%alchemist_distributed -n 2
    model, optimizer = alchemist.distribute(model, optimizer)
    ...

From Python: :func:`submit`, :func:`jobs`, :func:`attach`, :func:`session` (interactive). Inside a training cell (and
in a plain notebook, at world size 1): :func:`context`, :func:`distribute`,
:func:`shard`, :func:`log`, :func:`save_checkpoint`, :func:`restore`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from alchemist._lazy import lazy_exports

if TYPE_CHECKING:
    from alchemist.client import DryRun, Job, attach, jobs, submit
    from alchemist.job.spec import JobSpec, JobState, JobStatus, Resources
    from alchemist.runtime import (
        context,
        distribute,
        log,
        per_worker_batch,
        restart_count,
        restore,
        save_checkpoint,
        shard,
    )

__version__ = "0.1.0"

# Everything loads on first use: a rank, a launcher or the hub that imports one module
# of Alchemist loads that module, not the client's job store or the runtime's helpers.
_EXPORTS = {
    **dict.fromkeys(("DryRun", "Job", "attach", "jobs", "submit"), "alchemist.client"),
    **dict.fromkeys(("JobSpec", "JobState", "JobStatus", "Resources"), "alchemist.job.spec"),
    **dict.fromkeys(
        (
            "context",
            "distribute",
            "log",
            "per_worker_batch",
            "restart_count",
            "restore",
            "save_checkpoint",
            "shard",
        ),
        "alchemist.runtime",
    ),
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)


def session(*args: Any, **kwargs: Any) -> Any:
    """Start an interactive session: N ranks to work in cell by cell (see
    :func:`alchemist.interactive.sessions.session`; docs/interactive.md)."""
    from alchemist.interactive.sessions import session as start

    return start(*args, **kwargs)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext alchemist``: register the magics."""
    from alchemist.magics import load_ipython_extension as _load

    _load(ipython)


__all__ = [
    "DryRun",
    "Job",
    "JobSpec",
    "JobState",
    "JobStatus",
    "Resources",
    "attach",
    "context",
    "distribute",
    "jobs",
    "load_ipython_extension",
    "log",
    "per_worker_batch",
    "restart_count",
    "restore",
    "save_checkpoint",
    "session",
    "shard",
    "submit",
]
