"""Stall detection from the ranks' progress: which rank stopped advancing, and since when.

Each rank's metric events (``metrics/rank-<r>.jsonl``, written by ``alchemist.log``)
say its last step and when it logged it. A job is *stalled* when no rank advanced for
``max(30 s, 10 x the median time between a rank's logged steps)``; the laggard is the
rank at the lowest step: ``"rank 1 at step 1199 (41 s ago); rank 0 at 1200"``.

Only the tail of each file is read, so this costs the same however long the job ran.
It is a note on a running job, never a state: a slow phase misread as a stall costs a
warning, not a job. It imports neither torch nor the job store.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from alchemist.job.jobdir import JobDir

#: The threshold is never below this many seconds.
MIN_STALL_S = 30.0
#: The threshold is this many times the median time between logged steps.
STALL_FACTOR = 10.0
#: Bytes read from the end of each rank's metrics file.
TAIL_BYTES = 16 * 1024


@dataclass(frozen=True)
class RankProgress:
    """One rank's last logged step, when it logged it, and its recent step times."""

    rank: int
    step: int
    time: float
    #: seconds between its consecutive logged steps, oldest first (the tail's)
    intervals: tuple[float, ...] = ()


@dataclass(frozen=True)
class Stall:
    """The verdict: ``stalled`` with a one-line ``note`` naming the laggard(s)."""

    stalled: bool
    #: seconds since any rank last advanced
    idle_s: float
    #: the threshold ``idle_s`` was compared with
    threshold_s: float
    #: ranks at the lowest step, when the ranks are not all at the same step
    laggards: list[int]
    #: e.g. "rank 1 at step 1199 (41 s ago); rank 0 at 1200"
    note: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def format_ranks(ranks: list[int]) -> str:
    """``[0, 1, 2, 4, 6, 7]`` → ``"ranks 0–2, 4, 6–7"``; one rank is ``"rank 3"``."""
    ranks = sorted(set(ranks))
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    parts: list[str] = []
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(str(start) if start == prev else f"{start}–{prev}")
        if r is not None:
            start = prev = r
    return "ranks " + ", ".join(parts)


def _tail_events(path: Path) -> list[dict[str, Any]]:
    """The well-formed events in the last :data:`TAIL_BYTES` of a metrics file."""
    from alchemist.metrics.reader import parse_event

    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - TAIL_BYTES)
            f.seek(start)
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").split("\n")
    if start > 0:
        lines = lines[1:]  # the first line is cut
    return [e for line in lines if (e := parse_event(line.strip())) is not None]


def from_events(events: list[dict[str, Any]]) -> dict[int, RankProgress]:
    """Each rank's progress from its events in file order (the newest attempt's only)."""
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for e in events:
        by_rank.setdefault(int(e["rank"]), []).append(e)
    out: dict[int, RankProgress] = {}
    for rank, evs in by_rank.items():
        attempt = max(int(e.get("attempt") or 0) for e in evs)
        evs = [e for e in evs if int(e.get("attempt") or 0) == attempt and "time" in e]
        if not evs:
            continue
        intervals = []
        for a, b in itertools.pairwise(evs):
            if int(b["step"]) > int(a["step"]) and float(b["time"]) >= float(a["time"]):
                intervals.append(float(b["time"]) - float(a["time"]))
        last = evs[-1]
        out[rank] = RankProgress(rank, int(last["step"]), float(last["time"]), tuple(intervals))
    return out


def read_progress(job_dir: JobDir) -> dict[int, RankProgress]:
    """Each rank's progress, from the tails of its metrics file."""
    events: list[dict[str, Any]] = []
    for path in job_dir.metrics_by_rank().values():
        events.extend(_tail_events(path))
    return from_events(events)


def threshold(progress: dict[int, RankProgress], floor: float | None = None) -> float:
    """``max(floor, 10 x median time between logged steps)`` over every rank (``floor``
    None: :data:`MIN_STALL_S`)."""
    floor = MIN_STALL_S if floor is None else floor
    intervals = [i for p in progress.values() for i in p.intervals]
    median = statistics.median(intervals) if intervals else 0.0
    return max(floor, STALL_FACTOR * median)


def _ago(seconds: float) -> str:
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def assess(
    progress: dict[int, RankProgress],
    world_size: int,
    now: float | None = None,
    floor: float | None = None,
) -> Stall | None:
    """Whether the job stalled, and who lags; None when no rank has logged a step yet
    (there is no progress to judge by).

    Args:
        progress: each rank's progress (:func:`read_progress`).
        world_size: the job's ranks; one that never logged is a laggard.
        now: the time to judge at (default: now).
        floor: the least threshold in seconds (None: :data:`MIN_STALL_S`).
    """
    if not progress:
        return None
    now = time.time() if now is None else now
    newest = max(p.time for p in progress.values())
    idle = max(0.0, now - newest)
    limit = threshold(progress, floor)
    silent = [r for r in range(world_size) if r not in progress]
    low = min(p.step for p in progress.values())
    high = max(p.step for p in progress.values())
    laggards = silent or ([r for r, p in progress.items() if p.step == low] if low < high else [])
    if silent:
        others = sorted(progress)
        note = (
            f"{format_ranks(silent)} logged no step yet; {format_ranks(others)} at step {high}"
            f" ({_ago(now - newest)})"
        )
    elif laggards:
        lag = progress[laggards[0]]
        ahead = sorted(r for r in progress if r not in laggards)
        steps = sorted({progress[r].step for r in ahead})
        at = str(steps[0]) if len(steps) == 1 else f"steps {steps[0]}–{steps[-1]}"
        note = (
            f"{format_ranks(laggards)} at step {low} ({_ago(now - lag.time)});"
            f" {format_ranks(ahead)} at {at}"
        )
    else:
        note = f"every rank at step {high}; no rank advanced for {idle:.0f} s"
    stalled = idle > limit
    if stalled:
        note = f"no rank advanced for {idle:.0f} s (threshold {limit:.0f} s): {note}"
    return Stall(stalled, round(idle, 3), round(limit, 3), sorted(laggards), note)


def stall_of(job_dir: JobDir, world_size: int, now: float | None = None) -> Stall | None:
    """:func:`assess` of the job's metrics files."""
    return assess(read_progress(job_dir), world_size, now)
