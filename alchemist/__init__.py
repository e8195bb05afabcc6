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

from typing import Any

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
from alchemist.spec import JobSpec, JobState, JobStatus, Resources

__version__ = "0.1.0"

# The client (job store, backends) loads on first use, so worker processes, which
# only need the runtime helpers, start without SQLAlchemy.
_CLIENT_NAMES = ("DryRun", "Job", "attach", "jobs", "submit")


def session(*args: Any, **kwargs: Any) -> Any:
    """Start an interactive session: N ranks to work in cell by cell (see
    :func:`alchemist.interactive.sessions.session`; docs/interactive.md)."""
    from alchemist.interactive.sessions import session as start

    return start(*args, **kwargs)


def __getattr__(name: str) -> Any:
    if name in _CLIENT_NAMES:
        from alchemist import client

        return getattr(client, name)
    raise AttributeError(f"module 'alchemist' has no attribute {name!r}")


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
