"""A bounded, downsampled summary of a metrics file, cached beside it.

A job with ten million events has a gigabyte of ``rank-<r>.jsonl``; reading it from the
start takes minutes, and a chart shows a few thousand points anyway. The summary is the
downsampled way in: for each metric of each rank, a fixed number of buckets of
consecutive points, each holding the bucket's first, last, smallest and largest point
and its first NaN (the "M4" rule of :mod:`alchemist.metrics.downsample`, made
mergeable), plus what the monitor's progress table needs (latest step and time, the
last 20 ``(time, step)``, ``total_steps``, ``batch_size``, events per rank) and the
attempt each rank reached (:mod:`alchemist.metrics.attempts`). It covers the file up to
a byte offset (always at a line end); the events after it are read as usual, from the
cursor it gives (:meth:`alchemist.metrics.reader.MetricsReader.overview`), so a caller
who starts from the summary and then pages with cursors sees every later event exactly
once.

Bounded: a series keeps at most :data:`MAX_BUCKETS` buckets (two neighbours merge, and
each bucket's width doubles, when a new one would not fit), fewer when a file has many
series (:data:`POINT_BUDGET` stored points per file), so the summary's size does not
grow with the history.

Who writes it: readers. Building it costs one pass over the bytes it covers; the pass
is cached in ``metrics/summaries/<file stem>.json`` with the offset it covers, and the
next reader folds in only the bytes after that offset. Rank 0's TensorBoard converter
(already reading every rank's events off the training process, about once a second)
keeps the summaries current while a job runs (:class:`SummaryKeeper`), so an attach or
a REST read mid-job or after it folds only the last seconds. The training processes pay
nothing.

Never wrong, at worst slow: the cache file is a header line (format, SHA-256 of the
body) and a JSON body, written atomically (a rename, atomic on NFS too, where a job
folder has one writer host per file but readers may run anywhere); it is used only when
the digest matches, the body parses, and the metrics file still holds, at the covered
offset, the bytes the summary saw there (the file's head and the 64 bytes before the
offset): a truncated, replaced or rewritten file, a damaged or foreign summary, are
ignored and the summary is rebuilt from byte 0. A cache that cannot be written (a
read-only job folder) only costs the next reader the same pass.

After a restart (a rank's newer attempt redoing steps from ``s``), the points at steps
``>= s`` are dropped from that rank's buckets, as the monitor drops them from its
curves; a bucket cut that way keeps the real points it stored below ``s`` (its extremes
are then those of the points it kept).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from alchemist.metrics.attempts import AttemptTracker
from alchemist.metrics.events import META_KEYS

FORMAT = 1
#: Buckets a series keeps at most (a power of two): about 5 stored points each.
MAX_BUCKETS = 512
#: ... and at least, however many series a file has.
MIN_BUCKETS = 16
#: Stored points per file, over all its series (many metric keys: fewer buckets each).
POINT_BUDGET = 200_000
#: Bytes of the metrics file checked at the covered offset (and at its head).
CHECK_BYTES = 64
HEAD_BYTES = 4096
#: How many recent ``(time, step)`` pairs a rank's progress keeps (the monitor's rate).
RECENT = 20
SUMMARY_DIR = "summaries"

# A bucket is a list: [n, first, last, lo, hi, nan]; a point is [ordinal, x, y] (the
# ordinal orders points within a series), lo/hi/nan are None until seen.
N, FIRST, LAST, LO, HI, NAN = range(6)


def _cap(n_series: int) -> int:
    """Buckets per series for a file with ``n_series`` series (a power of two)."""
    want = POINT_BUDGET // (5 * max(1, n_series))
    cap = MIN_BUCKETS
    while cap * 2 <= min(MAX_BUCKETS, want):
        cap *= 2
    return cap


def _merge(a: list[Any], b: list[Any]) -> list[Any]:
    lo = a[LO] if b[LO] is None or (a[LO] is not None and a[LO][2] <= b[LO][2]) else b[LO]
    hi = a[HI] if b[HI] is None or (a[HI] is not None and a[HI][2] >= b[HI][2]) else b[HI]
    return [a[N] + b[N], a[FIRST], b[LAST], lo, hi, a[NAN] or b[NAN]]


class SeriesSummary:
    """The buckets of one series (one metric of one rank)."""

    __slots__ = ("buckets", "count", "next_ordinal", "width")

    def __init__(self) -> None:
        self.width = 1  # points per full bucket
        self.count = 0  # points logged (less those a restart superseded)
        self.next_ordinal = 0
        self.buckets: list[list[Any]] = []

    def add(self, x: float, y: float, cap: int) -> None:
        buckets = self.buckets
        if not buckets or buckets[-1][N] >= self.width:
            if len(buckets) >= cap:
                self.shrink(cap // 2)
                buckets = self.buckets
            buckets.append([0, None, None, None, None, None])
        b = buckets[-1]
        p = [self.next_ordinal, x, y]
        self.next_ordinal += 1
        self.count += 1
        if b[N] == 0:
            b[FIRST] = p
        b[N] += 1
        b[LAST] = p
        if y != y:  # NaN: kept once per bucket, never an extreme
            if b[NAN] is None:
                b[NAN] = p
            return
        if b[LO] is None or y < b[LO][2]:
            b[LO] = p
        if b[HI] is None or y > b[HI][2]:
            b[HI] = p

    def shrink(self, cap: int) -> None:
        """Merge neighbours (doubling the width) until at most ``cap`` buckets remain."""
        while len(self.buckets) > cap:
            old = self.buckets
            self.buckets = [
                _merge(old[i], old[i + 1]) if i + 1 < len(old) else old[i]
                for i in range(0, len(old), 2)
            ]
            self.width *= 2

    def drop_from(self, x0: float) -> bool:
        """Drop the points at ``x >= x0`` (steps a restarted attempt redoes)."""
        changed = False
        kept: list[list[Any]] = []
        for b in self.buckets:
            points = [p for p in b[FIRST : NAN + 1] if p is not None]
            keep = [p for p in points if p[1] < x0]
            if len(keep) == len(points):
                kept.append(b)
                continue
            changed = True
            if not keep:
                self.count -= b[N]
                continue
            first = min(keep, key=lambda p: p[0])
            last = max(keep, key=lambda p: p[0])
            finite = [p for p in keep if p[2] == p[2]]
            n = min(b[N], last[0] - first[0] + 1)
            self.count -= b[N] - n
            kept.append(
                [
                    n,
                    first,
                    last,
                    min(finite, key=lambda p: p[2]) if finite else None,
                    max(finite, key=lambda p: p[2]) if finite else None,
                    next((p for p in keep if p[2] != p[2]), None),
                ]
            )
        self.buckets = kept
        return changed

    def points(self) -> tuple[list[float], list[float]]:
        """The stored points in logged order: ``(steps, values)``."""
        seen: dict[int, tuple[float, float]] = {}
        for b in self.buckets:
            for p in b[FIRST : NAN + 1]:
                if p is not None:
                    seen[p[0]] = (p[1], p[2])
        ordered = [seen[k] for k in sorted(seen)]
        return [x for x, _ in ordered], [y for _, y in ordered]

    def to_json(self) -> list[Any]:
        return [self.width, self.count, self.next_ordinal, self.buckets]

    @classmethod
    def from_json(cls, data: list[Any]) -> SeriesSummary:
        s = cls()
        s.width, s.count, s.next_ordinal, buckets = (
            int(data[0]),
            int(data[1]),
            int(data[2]),
            data[3],
        )
        for b in buckets:
            if len(b) != 6 or b[FIRST] is None or b[LAST] is None:
                raise ValueError("bad bucket")
            for p in b[FIRST:]:
                if p is not None and (len(p) != 3 or not isinstance(p[0], int)):
                    raise ValueError("bad point")
        s.buckets = buckets
        return s


class FileSummary:
    """The summary of one metrics file up to byte :attr:`offset` (see the module doc)."""

    def __init__(self) -> None:
        self.offset = 0
        self.head = ""  # SHA-256 of the file's first HEAD_BYTES (or fewer) bytes
        self.tail = ""  # SHA-256 of the CHECK_BYTES before offset
        self.series: dict[tuple[str, int], SeriesSummary] = {}
        self.order: list[str] = []  # metric names in order of first appearance
        self.progress: dict[int, dict[str, Any]] = {}
        self.attempts = AttemptTracker()
        self.skipped = 0

    # -- folding events in ------------------------------------------------------------
    def fold(self, events: Iterable[dict[str, Any]]) -> None:
        """Add events read after :attr:`offset`, in file order (the caller moves
        :attr:`offset` to where they end)."""
        cap = _cap(len(self.series))
        for e in events:
            step = e.get("step")
            if step is None:
                continue
            rank = int(e["rank"])
            cut = self.attempts.restart_at(e)
            if cut is not None:
                for (_name, r), s in self.series.items():
                    if r == rank:
                        s.drop_from(cut)
            prog = self.progress.get(rank)
            if prog is None:
                prog = self.progress[rank] = {"events": 0, "recent": deque(maxlen=RECENT)}
            wall = float(e.get("time") or 0.0)
            prog["step"], prog["time"] = int(step), wall
            prog["events"] += 1
            prog["recent"].append((wall, int(step)))
            x = float(step)
            for name, value in e["values"].items():
                if name in META_KEYS:
                    prog[name] = float(value)
                    continue
                curve = self.series.get((name, rank))
                if curve is None:
                    curve = self.series[(name, rank)] = SeriesSummary()
                    if name not in self.order:
                        self.order.append(name)
                    cap = _cap(len(self.series))
                    if cap < MAX_BUCKETS:
                        for other in self.series.values():
                            other.shrink(cap)
                curve.add(x, float(value), cap)

    # -- persistence ------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        body = json.dumps(
            {
                "offset": self.offset,
                "head": self.head,
                "tail": self.tail,
                "order": self.order,
                "series": [[n, r, s.to_json()] for (n, r), s in self.series.items()],
                "progress": {
                    str(r): {**p, "recent": list(p["recent"])} for r, p in self.progress.items()
                },
                "attempts": {str(k): v for k, v in self.attempts.seen.items()},
                "skipped": self.skipped,
            },
            separators=(",", ":"),
        ).encode()
        header = json.dumps({"format": FORMAT, "sha256": hashlib.sha256(body).hexdigest()})
        return header.encode() + b"\n" + body

    @classmethod
    def from_bytes(cls, data: bytes) -> FileSummary:
        """Parse a cache file; ValueError (or KeyError/TypeError) when it is not one."""
        header, sep, body = data.partition(b"\n")
        if not sep:
            raise ValueError("no header")
        head = json.loads(header)
        if head.get("format") != FORMAT or head.get("sha256") != hashlib.sha256(body).hexdigest():
            raise ValueError("another format, or damaged")
        d = json.loads(body)
        s = cls()
        s.offset, s.head, s.tail = int(d["offset"]), str(d["head"]), str(d["tail"])
        s.order = [str(n) for n in d["order"]]
        s.series = {(str(n), int(r)): SeriesSummary.from_json(v) for n, r, v in d["series"]}
        for r, p in d["progress"].items():
            recent: deque[tuple[float, int]] = deque(
                ((float(t), int(st)) for t, st in p["recent"]), maxlen=RECENT
            )
            s.progress[int(r)] = {**p, "recent": recent, "events": int(p["events"])}
        s.attempts = AttemptTracker({int(k): int(v) for k, v in d["attempts"].items()})
        s.skipped = int(d.get("skipped", 0))
        if s.offset < 0:
            raise ValueError("negative offset")
        return s


def summary_path(metrics_file: Path) -> Path:
    """Where the summary of ``metrics_file`` is cached."""
    return metrics_file.parent / SUMMARY_DIR / f"{metrics_file.stem}.json"


def _digest(path: Path, start: int, size: int) -> str | None:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(size)
    except OSError:
        return None
    if len(data) != size:
        return None
    return hashlib.sha256(data).hexdigest()


def fingerprint(path: Path, offset: int) -> tuple[str, str] | None:
    """``(head, tail)`` digests of ``path`` for a summary covering ``offset`` bytes
    (None: the file is shorter)."""
    head = _digest(path, 0, min(offset, HEAD_BYTES))
    tail = _digest(path, max(0, offset - CHECK_BYTES), min(offset, CHECK_BYTES))
    if head is None or tail is None:
        return None
    return head, tail


def load(metrics_file: Path) -> FileSummary | None:
    """The cached summary of ``metrics_file`` when it is still true of the file; else
    None (missing, damaged, or the file changed under it)."""
    try:
        data = summary_path(metrics_file).read_bytes()
        summary = FileSummary.from_bytes(data)
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None
    if fingerprint(metrics_file, summary.offset) != (summary.head, summary.tail):
        return None
    return summary


def save(metrics_file: Path, summary: FileSummary) -> bool:
    """Cache ``summary`` atomically; False when the folder is not writable (no harm)."""
    marks = fingerprint(metrics_file, summary.offset)
    if marks is None:
        return False
    summary.head, summary.tail = marks
    target = summary_path(metrics_file)
    try:
        target.parent.mkdir(mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(summary.to_bytes())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return False
    return True


class SummaryKeeper:
    """Keeps the summaries of a job's metric files current (rank 0's TensorBoard
    converter runs one): each :meth:`refresh` folds in the bytes written since, and
    caches the result at most every ``save_every`` seconds (and when asked)."""

    def __init__(self, reader: Any, save_every: float = 2.0) -> None:
        self.reader = reader
        self.save_every = save_every
        self._summaries: dict[str, FileSummary] = {}
        self._saved: dict[str, tuple[float, int]] = {}

    def refresh(self, force_save: bool = False) -> None:
        now = time.monotonic()
        for key, path in self.reader.files():
            with contextlib.suppress(OSError):
                summary = self._summaries.get(key)
                if summary is None or fingerprint(path, summary.offset) != (
                    summary.head,
                    summary.tail,
                ):
                    summary = self._summaries[key] = load(path) or FileSummary()
                self.reader.fold_file(path, summary, None)
                at, offset = self._saved.get(key, (-math.inf, -1))
                if offset != summary.offset and (force_save or now - at >= self.save_every):
                    save(path, summary)
                    self._saved[key] = (now, summary.offset)
                else:
                    marks = fingerprint(path, summary.offset)
                    if marks is not None:
                        summary.head, summary.tail = marks
