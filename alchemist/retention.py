"""Retention: removing old jobs, the user's own and finished ones only.

``alchemist prune --older-than 30d`` (or ``--keep 1000``, or both) first says what it
would remove and removes nothing; ``--yes`` removes it: each job's row, then its folder
(logs, metrics, checkpoints, TensorBoard files). Never a job that is pending, queued,
running or restarting (its state is reconciled with the backend just before), never
another user's, never a folder outside the jobs folder (whatever a row says).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from alchemist.errors import SpecError
from alchemist.job import config
from alchemist.job.spec import JobState
from alchemist.store import JobRecord, get_store

_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw])\s*")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def parse_duration(text: str) -> float:
    """Seconds of ``"30d"``, ``"12h"``, ``"90m"``, ``"45s"``, ``"2w"``.

    Raises:
        SpecError: not a duration (the message shows the form).
    """
    match = _DURATION.fullmatch(text)
    if match is None:
        raise SpecError(
            f"--older-than takes a number and a unit (s, m, h, d, w), like 30d or 12h; got {text!r}"
        )
    return float(match.group(1)) * _UNIT_S[match.group(2)]


@dataclass
class Plan:
    """What a prune removes: the jobs (newest first) and the bytes of their folders."""

    jobs: list[JobRecord] = field(default_factory=list)
    bytes: int = 0


def _size(folder: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total


def _inside_jobs_root(job_dir: str) -> Path | None:
    """The job's folder when it lies directly in the jobs folder, else None."""
    root = config.jobs_root().resolve()
    path = Path(job_dir)
    try:
        resolved = path.resolve()
    except OSError:
        return None
    return resolved if resolved.parent == root and not path.is_symlink() else None


def plan(older_than: float | None = None, keep: int | None = None) -> Plan:
    """The current user's finished jobs that a prune would remove: those that ended (or
    were made, if they never started) more than ``older_than`` seconds ago, and those
    beyond the newest ``keep`` jobs (counting every job, running ones too).

    Raises:
        SpecError: neither criterion, or a negative one.
    """
    if older_than is None and keep is None:
        raise SpecError("say what to prune: --older-than (like 30d) and/or --keep N")
    if (older_than is not None and older_than < 0) or (keep is not None and keep < 0):
        raise SpecError("--older-than and --keep are never negative")
    owner = config.current_user()
    cutoff = None if older_than is None else time.time() - older_than
    out = Plan()
    for position, record in enumerate(get_store().list(owner)):
        if not JobState(record.state).is_terminal:
            continue
        beyond = keep is not None and position >= keep
        old = cutoff is not None and (record.finished or record.created) < cutoff
        if beyond or old:
            out.jobs.append(record)
            folder = _inside_jobs_root(record.job_dir)
            out.bytes += _size(folder) if folder is not None else 0
    return out


def prune(jobs: list[JobRecord]) -> tuple[int, int]:
    """Remove ``jobs`` (a :func:`plan`'s): each one's row, then its folder. A job that is
    no longer finished, or not the current user's, is left. Returns ``(removed, bytes
    freed)``."""
    from alchemist.client import Job

    owner = config.current_user()
    store = get_store()
    removed = freed = 0
    for record in jobs:
        current = store.get(record.id)
        if current is None or current.owner != owner:
            continue
        try:
            state = Job(current).status().state
        except Exception:  # an unreadable job: its stored state decides
            state = JobState(current.state)
        if not state.is_terminal:
            continue
        if not store.delete(current.id, owner=owner):
            continue
        removed += 1
        folder = _inside_jobs_root(current.job_dir)
        if folder is not None and folder.name == current.id:
            freed += _size(folder)
            shutil.rmtree(folder, ignore_errors=True)
    return removed, freed
