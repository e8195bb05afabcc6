"""Interactive mode: a distributed session you work in cell by cell.

A session holds N ranks (ipyparallel engines started as local processes), each set up
exactly as a batch job's rank is (:mod:`alchemist.runtime.worker`): rank environment,
process group on an attempt-prefixed store, metrics reporter, system sampler and the
hang-diagnosis hooks. Cells run on every rank (or on some) with their state kept, and
the cells that worked become one batch job (:meth:`Session.promote`).

Python API: :func:`session` starts one and returns the :class:`Session`
(``run(code)``, ``push(...)``, ``pull(name, rank=0)``, ``status()``, ``restart()``,
``stop()``, ``promote(...)``). The magics are in :mod:`alchemist.interactive.magics`.
User guide: ``docs/interactive.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alchemist._lazy import lazy_exports

if TYPE_CHECKING:
    from alchemist.interactive.errors import CellFailed, SessionBroken, SessionError
    from alchemist.interactive.sessions import Session, current_session, session

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "CellFailed": "alchemist.interactive.errors",
        "SessionBroken": "alchemist.interactive.errors",
        "SessionError": "alchemist.interactive.errors",
        "Session": "alchemist.interactive.sessions",
        "current_session": "alchemist.interactive.sessions",
        "session": "alchemist.interactive.sessions",
    },
)


__all__ = ["CellFailed", "Session", "SessionBroken", "SessionError", "current_session", "session"]
