"""The monitor's log pane always reaches the end of a rank's log.

Under a flood of prints the pane read 256 KB a poll and, at the job's end, stopped on a
stale line: the last lines, where the final traceback is, were never shown. Real: the
monitor's data model on a job directory whose rank log holds 20 MB of lines, read as
the local backend reads logs (``alchemist.metrics.tail.read_lines``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alchemist.backends.api import LogChunk
from alchemist.job.jobdir import JobDir
from alchemist.metrics.tail import read_lines
from alchemist.widgets.monitor import LOG_TAIL_BYTES, MonitorData


class FloodedJob:
    """What the monitor reads of a job: its summary, directory and logs."""

    def __init__(self, job_dir: JobDir) -> None:
        self.job_dir = job_dir

    def to_dict(self) -> dict[str, Any]:
        return {"id": "jflood", "state": "running", "world_size": 1}

    def log_chunk(self, rank: int, since: int = 0, limit_bytes: int = 1 << 20) -> LogChunk:
        lines, cursor, more = read_lines(self.job_dir.rank_log(rank), since, limit_bytes)
        return LogChunk(rank=rank, lines=lines, cursor=cursor, truncated=more)


def test_a_flooded_log_is_caught_up_to_its_last_line_saying_what_was_skipped(
    tmp_path: Path,
) -> None:
    jd = JobDir(tmp_path / "jflood").create()
    log = jd.rank_log(0)
    log.parent.mkdir(parents=True, exist_ok=True)
    line = "x" * 90
    with open(log, "w") as f:
        f.writelines(f"{i:07d} {line}\n" for i in range(1000))
    data = MonitorData(FloodedJob(jd))  # type: ignore[arg-type]
    assert data._read_logs()
    assert data.log_tail(0)[-1].startswith("0000999 ")  # the first view: the tail

    with open(log, "a") as f:  # 20 MB more between two polls, then the traceback
        f.writelines(f"{i:07d} {line}\n" for i in range(1000, 1000 + 20 * 10_923))
        f.write("Traceback (most recent call last):\nValueError: the last line\n")
    assert data._read_logs()
    shown = data.log_tail(0)
    assert shown[-1] == "ValueError: the last line", shown[-3:]
    note = next(s for s in shown if s.startswith("[alchemist] "))
    assert " of rank 0's log skipped here" in note and "alchemist logs jflood --rank 0" in note
    assert data.log_cursors[0] == log.stat().st_size
    assert LOG_TAIL_BYTES < 20 << 20  # not vacuous: more than one read's worth was written
