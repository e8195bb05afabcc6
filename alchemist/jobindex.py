"""Keeping the job index complete, at a cost that does not grow with the history.

A job's files are written before its row (:func:`alchemist.client.submit`), so a row
never names a folder that is not there; a submit that dies in between (a killed kernel,
Ctrl-C at that moment) leaves a folder with no row, and a deleted index leaves every
folder without one. The job folders are the truth, and a listing indexes such folders
again, but it must not read every folder of a long history each time it lists:

- a submit marks its job in ``<jobs>/.indexing/<id>`` before it writes the folder and
  clears the mark once the row is in (:func:`indexing`); a listing reads only the marks
  left (:func:`reindex`): those of submits in flight and of submits that died, a
  handful however many jobs there are;
- an index that has not yet scanned the owner's folders (a new or deleted index, or one
  an earlier version made) scans them all once, and remembers it in the index itself,
  so a deleted index scans again.

Another user's folder is never adopted: its record must name the owner and its id.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from alchemist.job import config
from alchemist.job.jobdir import JobDir, make_private_dir
from alchemist.job.spec import JobState
from alchemist.store import JobRecord, JobStore, get_store

#: The folder of marks, under the jobs folder (a dot name: never a job's).
MARKS = ".indexing"
#: A mark whose job folder never appeared is a submit that died before it: dropped after.
STALE_MARK_S = 300.0


def _marks_dir() -> Path:
    return make_private_dir(config.jobs_root() / MARKS)


@contextlib.contextmanager
def indexing(job_id: str) -> Iterator[None]:
    """Mark ``job_id`` while its folder and row are written; the mark is cleared when
    the block ends normally (the row is in, or the folder was removed again). A block
    left by an exception keeps it, and the next listing settles the job from its files.
    """
    mark = _marks_dir() / job_id
    mark.touch()
    yield
    mark.unlink(missing_ok=True)


def _record_of(jd: JobDir, owner: str) -> JobRecord | None:
    """The row of the owner's job folder ``jd`` from its files; None when it is not one
    (not a job folder, half written, another user's)."""
    try:
        meta = json.loads(jd.record.read_text())
        spec = json.loads(jd.spec.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("owner") != owner or meta.get("id") != jd.job_id:
        return None
    try:
        created = float(meta.get("created") or jd.root.stat().st_mtime)
    except (OSError, TypeError, ValueError):
        return None
    return JobRecord(
        id=jd.job_id,
        owner=owner,
        name=str(meta.get("name") or "job"),
        backend=str(meta.get("backend") or "local"),
        state=JobState.PENDING.value,
        reason=None,
        created=created,
        started=None,
        finished=None,
        restarts=0,
        spec=spec,
        job_dir=str(jd.root),
    )


def _adopt(store: JobStore, jd: JobDir, owner: str) -> bool:
    record = _record_of(jd, owner)
    if record is None:
        return False
    try:
        store.add(record)
    except Exception:  # indexed meanwhile by another process
        return False
    return True


def _scan_key(owner: str) -> str:
    return f"scanned:{owner}:{config.jobs_root()}"


def _full_scan(store: JobStore, owner: str) -> int:
    root = config.jobs_root()
    known = store.ids()
    added = 0
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    for entry in entries:
        if entry.name.startswith(".") or entry.name in known:
            continue
        if entry.is_dir(follow_symlinks=False) and _adopt(store, JobDir(Path(entry.path)), owner):
            added += 1
    return added


def _settle_marks(store: JobStore, owner: str) -> int:
    root = config.jobs_root()
    try:
        marks = list(os.scandir(root / MARKS))
    except OSError:
        return 0
    added = 0
    for mark in marks:
        job_id = mark.name
        folder = root / job_id
        if store.get(job_id) is not None:
            Path(mark.path).unlink(missing_ok=True)  # its submit got the row in
            continue
        if folder.is_dir() and _adopt(store, JobDir(folder), owner):
            added += 1
            Path(mark.path).unlink(missing_ok=True)
            continue
        # A submit in flight (its files half written), or one that died before its
        # folder or its record: dropped once it is old, the folder left as it is.
        try:
            stale = time.time() - mark.stat().st_mtime > STALE_MARK_S
        except OSError:
            continue
        if stale:
            Path(mark.path).unlink(missing_ok=True)
    return added


def reindex(owner: str) -> int:
    """Index the owner's job folders that have no row; returns how many were added.

    Reads the marks of unfinished submits; the first time an index sees this owner (or
    after it was deleted), every job folder once.
    """
    store = get_store()
    added = 0
    key = _scan_key(owner)
    if store.get_meta(key) is None:
        added += _full_scan(store, owner)
        store.set_meta(key, str(time.time()))
    return added + _settle_marks(store, owner)
