"""A job as text, for the magics and the CLI: rank logs streamed, status lines, job tables."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from alchemist.job.spec import JobStatus

if TYPE_CHECKING:
    from alchemist.client import Job

#: Lines a foreground cell shows before it starts cutting (the log files keep all).
DEFAULT_MAX_LINES = 1000


class LogFollower:
    """Tails every rank's log of a job with per-rank cursors.

    Args:
        job: the job.
        write: where lines go (e.g. ``print``).
        max_lines: show at most this many lines; the rest are counted and reported.
        ranks: only these ranks (None: all).
    """

    def __init__(
        self,
        job: Job,
        write: Callable[[str], None],
        max_lines: int = DEFAULT_MAX_LINES,
        ranks: list[int] | None = None,
    ) -> None:
        self.job = job
        self.write = write
        self.max_lines = max_lines
        self.ranks = ranks
        self.cursors: dict[int, int] = {}
        self.shown = 0
        self.cut = 0

    def _ranks(self) -> list[int]:
        return self.ranks if self.ranks is not None else self.job.ranks()

    def drain(self) -> int:
        """Print every complete line written since the last call; returns how many."""
        count = 0
        prefix = self.ranks is None or len(self.ranks) != 1
        for rank in self._ranks():
            while True:
                chunk = self.job.log_chunk(rank, self.cursors.get(rank, 0))
                self.cursors[rank] = chunk.cursor
                for line in chunk.lines:
                    count += 1
                    if self.shown < self.max_lines:
                        self.write(f"[rank {rank}] {line}" if prefix else line)
                        self.shown += 1
                    else:
                        self.cut += 1
                if not chunk.truncated:
                    break
        return count

    def follow(self, poll: float = 0.25, until_terminal: bool = True) -> JobStatus:
        """Print lines as they come until the job ends; returns its final status."""
        while True:
            status = self._poll()
            if status.state.is_terminal or not until_terminal:
                self.drain()  # lines written just before the end
                return status
            time.sleep(poll)

    async def follow_async(self, poll: float = 0.25) -> JobStatus:
        """:meth:`follow` for an awaiting cell (the kernel stays free between polls)."""
        while True:
            status = self._poll()
            if status.state.is_terminal:
                self.drain()  # lines written just before the end
                return status
            await asyncio.sleep(poll)

    def _poll(self) -> JobStatus:
        """The job's status, read before printing what is new (so no line is missed)."""
        status = self.job.status()
        self.drain()
        return status

    def summary(self) -> str | None:
        if not self.cut:
            return None
        return (
            f"... {self.cut} more lines not shown (limit {self.max_lines});"
            f" see them with %alchemist_logs {self.job.id}"
        )


def status_line(job: Job, status: JobStatus) -> str:
    """One line: the job's id, name, state and, for a failure, why."""
    elapsed = ""
    if status.started:
        end = status.finished or time.time()
        elapsed = f" after {end - status.started:.1f} s"
    line = f"job {job.id} ({job.name}) {status.state.value}{elapsed}"
    if status.restarts:
        line += f", {status.restarts} restart(s)"
    if status.reason:
        line += f": {status.reason}"
    return line


def format_jobs_table(jobs: list[Job]) -> str:
    """The jobs as a text table, one line each (``%alchemist_jobs``, ``alchemist jobs``),
    then a line for each stalled job naming its laggard (from the same status)."""
    if not jobs:
        return "no jobs yet"
    rows = [("ID", "NAME", "STATE", "WORLD", "BACKEND", "CREATED", "REASON")]
    stalls = []
    for j in jobs:
        st = j.status()
        note = j.stalled(st)
        if note:
            stalls.append(f"job {j.id} stalled: {note}")
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j.created))
        rows.append(
            (
                j.id,
                j.name,
                st.state.value,
                str(j.spec.world_size),
                j.backend_name,
                created,
                st.reason or "",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    table = "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1]
        for r in rows
    ).rstrip()
    return "\n".join([table, *stalls])
