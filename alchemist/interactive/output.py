"""A cell's output, read from the ranks' logs and shown with a rank prefix.

Each engine's output goes to its ``logs/rank-<r>.log`` (C-level and subprocess output
too). A cell's output is what each log gained since the cell was sent: a
:class:`RankStreams` remembers each log's size at that moment and hands out the new
complete lines, in order per rank, until the cell ends (then the last partial line too).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import TextIO

from alchemist.jobdir import JobDir


class RankStreams:
    """The new lines of some ranks' logs since this object was made."""

    def __init__(self, job_dir: JobDir, ranks: Iterable[int]) -> None:
        self.job_dir = job_dir
        self.offsets: dict[int, int] = {}
        self.partial: dict[int, bytes] = {}
        for r in ranks:
            try:
                self.offsets[r] = os.path.getsize(job_dir.rank_log(r))
            except OSError:
                self.offsets[r] = 0
            self.partial[r] = b""

    def read(self, final: bool = False) -> list[tuple[int, str]]:
        """``(rank, line)`` of the complete lines written since the last read, rank
        after rank; with ``final``, a last line without its newline too."""
        out: list[tuple[int, str]] = []
        for r, offset in self.offsets.items():
            try:
                with open(self.job_dir.rank_log(r), "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except OSError:
                data = b""
            self.offsets[r] = offset + len(data)
            buf = self.partial[r] + data
            *lines, rest = buf.split(b"\n")
            if final and rest:
                lines.append(rest)
                rest = b""
            self.partial[r] = rest
            out.extend((r, line.decode("utf-8", errors="replace")) for line in lines)
        return out


def show(lines: list[tuple[int, str]], prefix: bool = True, file: TextIO | None = None) -> None:
    """Print ``(rank, line)`` pairs, each line with ``[rank r]`` before it."""
    out = file or sys.stdout
    for r, line in lines:
        out.write((f"[rank {r}] " if prefix else "") + line + "\n")
    if lines:
        out.flush()
