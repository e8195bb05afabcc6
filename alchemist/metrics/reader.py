"""Read a job's metric events from its per-rank files, with one cursor.

Layout (see :mod:`alchemist.job.jobdir`): rank ``r`` appends its events to
``<job_dir>/metrics/rank-<r>.jsonl`` and its system metrics to
``<job_dir>/metrics/system-rank-<r>.jsonl``. Each file has one writer host, because
appends from several hosts to one file are not atomic on NFS (the job directory of a
Kubernetes job): each client writes at the end of the file as it last saw it, so two
pods appending at once overwrite each other's events. A reader therefore reads a set of
files, which grows as ranks start.

One reader serves the monitor widget, ``Job.metrics()``, the REST API, the CLI and the
TensorBoard writer. A read returns the complete events written since the cursor and the
cursor for the next read, so a caller that keeps its cursor (even across a kernel
restart, or in a browser) never sees an event twice and never misses one, including the
events of a rank whose file appears after the cursor was made.

The cursor is an opaque string, safe in JSON and in a URL: the byte offset reached in
each file, e.g. ``"0:1834,1:1790"`` (rank 0's file at byte 1834, rank 1's at 1790; a
file not named is read from its start). ``None``, ``0`` and ``""`` mean "from the
start". Callers keep it and pass it back; they never compute with it. (A bare integer,
the cursor of versions that wrote one shared ``metrics.jsonl``, is an offset into that
file, so a cursor kept from then continues exactly on a job written then.)

Per file: a line the writer has only half written is left for the next read. Lines that
are not a well-formed event (not JSON, a torn write, a stray edit, a JSON object whose
keys have the wrong types: see :func:`parse_event`) are skipped and counted in
:attr:`MetricsReader.skipped` (and in an overview's ``skipped``), never an error. A
cursor offset past the end of a file reads nothing there (and stays). Within a rank, events come in file order; a
read returns the ranks one after the other (the old shared file first, then rank 0, 1,
...), not interleaved by time.

:meth:`MetricsReader.overview` is the other way in, for a first view of a long history:
every metric of every rank downsampled to a bounded number of points (first and last
step, each bucket's extremes), from the cached summaries of
:mod:`alchemist.metrics.summary` plus only the bytes written after them, and the cursor
to continue from with :meth:`MetricsReader.read` (which then returns exactly the events
the overview did not cover).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from alchemist.errors import CursorError
from alchemist.job.jobdir import JobDir
from alchemist.metrics import summary as summaries
from alchemist.metrics.tail import read_lines

#: Bytes handed to one ``read_lines`` call; a read loops until the file is drained.
CHUNK_BYTES = 4 << 20
#: A longer line is not an event (it is skipped, in pieces).
MAX_LINE = 64 << 20

REQUIRED_KEYS = ("rank", "step", "values")

#: The cursor's name for the one file all ranks shared in earlier versions.
SHARED_KEY = "shared"

_OFFSET = re.compile(r"[0-9]+")
_PART = re.compile(rf"([0-9]+|{SHARED_KEY}):([0-9]+)")
#: The largest offset in a cursor (a file offset is a signed 64-bit number).
MAX_OFFSET = (1 << 63) - 1

#: What callers pass as ``since``: a cursor a read returned, or None/0/"" for the start.
Cursor = str | int | None


def parse_cursor(cursor: Cursor) -> dict[str, int]:
    """The byte offset per file key (``"0"``, ``"1"``, ..., ``"shared"``) of a cursor.

    Raises:
        CursorError: ``cursor`` is not one that :meth:`MetricsReader.read` returns.
    """
    if cursor is None or cursor == "" or cursor == 0:
        return {}
    if isinstance(cursor, bool) or not isinstance(cursor, (int, str)):
        raise CursorError(f"a metrics cursor is a string, got {type(cursor).__name__}")
    if isinstance(cursor, str) and len(cursor) > 20 and _OFFSET.fullmatch(cursor):
        _too_large(cursor)  # int() refuses over 4300 digits
    if isinstance(cursor, int) or _OFFSET.fullmatch(cursor):
        offset = int(cursor)  # the byte offset of the shared file (earlier versions)
        if offset > MAX_OFFSET:
            _too_large(str(offset) if offset.bit_length() < 1000 else "a huge number")
        if offset < 0:
            raise CursorError(f"a metrics cursor is never negative, got {cursor}")
        return {SHARED_KEY: offset} if offset else {}
    offsets: dict[str, int] = {}
    for part in cursor.split(","):
        match = _PART.fullmatch(part)
        if match is None:
            raise CursorError(
                f"{cursor!r} is not a metrics cursor: pass back the cursor a read returned"
                ' (like "0:1834,1:1790"), or nothing to read from the start'
            )
        if len(match.group(2)) > 20 or int(match.group(2)) > MAX_OFFSET:
            _too_large(match.group(2))
        if len(match.group(1)) > 20:
            raise CursorError(f"{_clip(cursor)} is not a metrics cursor: no rank is that large")
        key, value = match.group(1), int(match.group(2))
        offsets[key if key == SHARED_KEY else str(int(key))] = value
    return offsets


def _clip(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)")


def _too_large(offset: str) -> None:
    raise CursorError(
        f"a metrics cursor holds file offsets up to {MAX_OFFSET}, got {_clip(offset)}:"
        " pass back the cursor a read returned"
    )


def format_cursor(offsets: Mapping[str, int]) -> str:
    """The cursor string of ``offsets`` (files at offset 0 are left out)."""
    keys = sorted(offsets, key=lambda k: (k != SHARED_KEY, int(k) if k.isdigit() else 0))
    return ",".join(f"{k}:{offsets[k]}" for k in keys if offsets[k])


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_event(line: str) -> dict[str, Any] | None:
    """Parse one line into an event, or None when it is not a well-formed event.

    Well-formed (what :mod:`alchemist.metrics.reporter` writes): a JSON object with
    ``rank`` (an integer from 0), ``step`` (a finite number, or null in a system
    metric), ``values`` (an object of numbers: NaN and ±Infinity are values too, as the
    reporter writes them) and, if present, ``time`` (a number or null) and ``attempt``
    (an integer or null). Anything else (a torn or truncated line, text, a ``"step":
    "one"``) is not an event: the readers and views skip it rather than fail on it.
    """
    if not line or line[0] != "{":
        return None
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: absurdly nested JSON
        return None
    if not isinstance(event, dict) or not all(k in event for k in REQUIRED_KEYS):
        return None
    rank, step, values = event["rank"], event["step"], event["values"]
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        return None
    if step is not None and not (_is_number(step) and math.isfinite(step)):
        return None
    if not isinstance(values, dict) or not all(_is_number(v) for v in values.values()):
        return None
    when = event.get("time")
    if when is not None and not _is_number(when):
        return None
    attempt = event.get("attempt")
    if attempt is not None and (not isinstance(attempt, int) or isinstance(attempt, bool)):
        return None
    return event


class MetricsChunk(NamedTuple):
    """What one read returns."""

    #: complete events, rank after rank, each rank's in file order
    events: list[dict[str, Any]]
    #: where the next read starts (pass it back as ``since``)
    cursor: str
    #: whether more was already written beyond ``max_bytes`` (read again at once)
    more: bool


class SeriesOverview(NamedTuple):
    """One metric of one rank in an overview."""

    #: the steps and values of the downsampled points, in logged order
    steps: list[float]
    values: list[float]
    #: how many points the rank logged for the metric (before downsampling)
    logged: int


class MetricsOverview(NamedTuple):
    """What :meth:`MetricsReader.overview` returns."""

    #: (metric, rank) → its downsampled points
    series: dict[tuple[str, int], SeriesOverview]
    #: metric names in order of first appearance
    metrics: list[str]
    #: rank → ``{"step", "time", "events", "recent": [(time, step), ...],
    #: "total_steps"?, "batch_size"?}`` as of the cursor
    progress: dict[int, dict[str, Any]]
    #: rank → the newest attempt seen (to go on applying :mod:`alchemist.metrics.attempts`)
    attempts: dict[int, int]
    #: where :meth:`MetricsReader.read` continues: the events after the overview
    cursor: str
    #: False when ``max_bytes`` stopped the pass before the end (call again to go on)
    complete: bool
    #: lines of the history covered that were not well-formed events (skipped)
    skipped: int = 0


class MetricsReader:
    """Tails the per-rank metric files of one job (see the module docstring).

    Args:
        job_dir: the job directory (a :class:`JobDir` or its path); its files may not
            exist yet: they read as empty.
        system: read the system metrics (``system-rank-<r>.jsonl``) instead of the
            events ``alchemist.log`` writes.
    """

    def __init__(self, job_dir: JobDir | Path | str, *, system: bool = False) -> None:
        self.job_dir = job_dir if isinstance(job_dir, JobDir) else JobDir(Path(job_dir))
        self.system = system
        #: how many malformed lines were skipped so far
        self.skipped = 0

    def files(self) -> list[tuple[str, Path]]:
        """``(cursor key, path)`` of every file to read, in reading order."""
        found = [
            (str(rank), path)
            for rank, path in self.job_dir.metrics_by_rank(system=self.system).items()
        ]
        shared = self.job_dir.shared_metrics(system=self.system)
        return [(SHARED_KEY, shared), *found] if shared.exists() else found

    def tail_cursor(self, tail_bytes: int) -> str:
        """A cursor from which :meth:`read` returns about the last ``tail_bytes`` of
        each file (from the first line that starts in them)."""
        offsets: dict[str, int] = {}
        for key, path in self.files():
            try:
                with open(path, "rb") as f:
                    size = f.seek(0, 2)
                    start = max(0, size - tail_bytes)
                    if start:
                        f.seek(start - 1)
                        cut = f.read(tail_bytes + 1).find(b"\n")
                        start = size if cut < 0 else start + cut
            except OSError:
                continue
            offsets[key] = start
        return format_cursor(offsets)

    def read(
        self, since: Cursor = None, max_bytes: int | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """Read the events written after cursor ``since``.

        Args:
            since: None (or 0, or ""): from the start; else the cursor a previous read
                returned (by this or any reader of the same job).
            max_bytes: stop after about this many bytes (None: read everything there
                is); the rest comes with the next read from the returned cursor. The
                budget is shared fairly between the ranks, so a rank that logs a lot
                does not hold back the others. An event is never split: one longer
                than the budget is still returned whole.

        Returns:
            ``(events, cursor)``: the events (see :class:`MetricsChunk`) and the
            cursor to read from next.

        Raises:
            CursorError: ``since`` is not a cursor.
        """
        chunk = self.read_chunk(since, max_bytes)
        return chunk.events, chunk.cursor

    def read_chunk(self, since: Cursor = None, max_bytes: int | None = None) -> MetricsChunk:
        """Like :meth:`read`, and says whether more events were already waiting."""
        offsets = parse_cursor(since)
        files = self.files()
        per_file: dict[str, list[dict[str, Any]]] = {key: [] for key, _ in files}
        waiting: list[tuple[str, Path]] = []
        if max_bytes is None:
            for key, path in files:
                per_file[key], offsets[key], _, _ = self._read_file(path, offsets.get(key, 0), None)
        else:
            # A first pass gives every file an equal share; a second hands what is left
            # to the files that had more.
            remaining = max_bytes
            share = max(1, max_bytes // max(1, len(files)))
            for key, path in files:
                events, offsets[key], more, used = self._read_file(path, offsets.get(key, 0), share)
                per_file[key] = events
                remaining -= used
                if more:
                    waiting.append((key, path))
            for key, path in list(waiting):
                if remaining <= 0:
                    break
                events, offsets[key], more, used = self._read_file(path, offsets[key], remaining)
                per_file[key].extend(events)
                remaining -= used
                if not more:
                    waiting.remove((key, path))
        out = [event for key, _ in files for event in per_file[key]]
        return MetricsChunk(out, format_cursor(offsets), bool(waiting))

    def _read_file(
        self, path: Path, since: int, budget: int | None
    ) -> tuple[list[dict[str, Any]], int, bool, int]:
        """``(events, offset, more, bytes used)`` of one file from byte offset ``since``."""
        events: list[dict[str, Any]] = []
        cursor = since
        left = budget
        try:
            past_end = since > os.stat(path).st_size
        except OSError:
            past_end = False  # missing: read_lines reads it as empty
        if past_end:  # a file system may refuse to seek that far: nothing to read there
            return events, since, False, 0
        limit = CHUNK_BYTES if left is None else max(1, min(CHUNK_BYTES, left))
        while True:
            lines, new_cursor, more = read_lines(path, cursor, limit)
            # read_lines hands out a line longer than the limit in pieces; an event is
            # never split, so read again with room for the whole line.
            piece = more and len(lines) == 1 and new_cursor - cursor == limit
            if piece and limit < MAX_LINE and parse_event(lines[0]) is None:
                limit *= 4
                continue
            for line in lines:
                event = parse_event(line)
                if event is None:
                    if line.strip():
                        self.skipped += 1
                    continue
                events.append(event)
            if left is not None:
                left -= new_cursor - cursor
            cursor = new_cursor
            if not more or (left is not None and left <= 0):
                return events, cursor, more, cursor - since
            limit = CHUNK_BYTES if left is None else max(1, min(CHUNK_BYTES, left))

    def fold_file(self, path: Path, summary: summaries.FileSummary, budget: int | None) -> bool:
        """Fold ``path``'s events after ``summary.offset`` into ``summary`` (about
        ``budget`` bytes at most; None: to the end), a chunk at a time; whether more
        was left."""
        left = budget
        while True:
            step = CHUNK_BYTES if left is None else max(1, min(CHUNK_BYTES, left))
            before = self.skipped
            events, offset, more, used = self._read_file(path, summary.offset, step)
            summary.fold(events)
            summary.offset = offset
            summary.skipped += self.skipped - before
            if left is not None:
                left -= used
            if not more or used == 0 or (left is not None and left <= 0):
                return more

    def overview(
        self, max_points: int = 2000, max_bytes: int | None = None, *, cache: bool = True
    ) -> MetricsOverview:
        """Every metric of every rank, downsampled, and the cursor after it.

        Reads each file's cached summary (:mod:`alchemist.metrics.summary`; rebuilt from
        byte 0 when missing, stale or damaged) and folds in only the bytes after it,
        then caches the result. The system metrics have no overview.

        Args:
            max_points: points per series at most (at least 8): the first and last point
                and each bucket's smallest, largest (and first NaN) are kept.
            max_bytes: fold about this many bytes at most (shared between the files;
                None: to the end); when that stops it early, ``complete`` is False and
                another call goes on from where this one stopped (its work is cached).
            cache: read and write the cached summaries (False: build them in memory).

        Raises:
            ValueError: the reader reads system metrics.
        """
        if self.system:
            raise ValueError("system metrics have no overview; read them with read()")
        import numpy as np

        from alchemist.metrics.downsample import minmax_downsample

        files = self.files()
        share = None if max_bytes is None else max(1, max_bytes // max(1, len(files)))
        offsets: dict[str, int] = {}
        complete = True
        merged: dict[tuple[str, int], tuple[list[float], list[float], int]] = {}
        order: list[str] = []
        progress: dict[int, dict[str, Any]] = {}
        attempts: dict[int, int] = {}
        skipped = 0
        for key, path in files:
            summary = (summaries.load(path) if cache else None) or summaries.FileSummary()
            start = summary.offset
            if self.fold_file(path, summary, share):
                complete = False
            if cache and summary.offset != start:
                summaries.save(path, summary)
            offsets[key] = summary.offset
            skipped += summary.skipped
            for (name, rank), s in summary.series.items():
                xs, ys = s.points()
                old = merged.get((name, rank))
                merged[(name, rank)] = (
                    (old[0] + xs, old[1] + ys, old[2] + s.count) if old else (xs, ys, s.count)
                )
            order.extend(n for n in summary.order if n not in order)
            for rank, p in summary.progress.items():
                progress[rank] = {**p, "recent": list(p["recent"])}
            for rank, a in summary.attempts.seen.items():
                attempts[rank] = max(a, attempts.get(rank, 0))
        series: dict[tuple[str, int], SeriesOverview] = {}
        for series_key, (xs, ys, count) in merged.items():
            x, y = minmax_downsample(np.asarray(xs, float), np.asarray(ys, float), max_points)
            series[series_key] = SeriesOverview(x.tolist(), y.tolist(), count)
        return MetricsOverview(
            series, order, progress, attempts, format_cursor(offsets), complete, skipped
        )

    def read_all(self) -> list[dict[str, Any]]:
        """Every complete event of every rank."""
        return self.read(None)[0]


def events_to_dataframe(events: Iterable[dict[str, Any]]) -> Any:
    """Events as a pandas DataFrame: columns job_id, rank, step, time, then one per metric.

    Raises:
        ImportError: pandas is not installed (the message says how to install it).
    """
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError("metrics as a DataFrame need pandas: pip install pandas") from e
    rows = [
        {
            "job_id": e.get("job_id"),
            "rank": e["rank"],
            "step": e["step"],
            "time": e.get("time"),
            **e["values"],
        }
        for e in events
    ]
    return pd.DataFrame(rows, columns=None if rows else ["job_id", "rank", "step", "time"])
