"""Read metric events from a job's ``metrics.jsonl`` (or ``system.jsonl``) with a cursor.

One reader serves the monitor widget, ``Job.metrics()``, the REST API and the CLI.
The cursor is a byte offset into the file (see :mod:`alchemist.metrics.tail`): a read
returns the complete events written since the cursor and the cursor for the next read,
so a caller that keeps its cursor (even across a kernel restart, by storing the int)
never sees an event twice and never misses one. A line the writer has only half
written is left for the next read. Lines that are not a JSON object with the event
keys (a torn write on a file system without atomic appends, a stray edit) are skipped
and counted in :attr:`MetricsReader.skipped`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from alchemist.metrics.tail import read_lines

#: Bytes handed to one ``read_lines`` call; a read loops until the file is drained.
CHUNK_BYTES = 4 << 20
#: A longer line is not an event (it is skipped, in pieces).
MAX_LINE = 64 << 20

REQUIRED_KEYS = ("rank", "step", "values")


def parse_event(line: str) -> dict[str, Any] | None:
    """Parse one line into an event, or None when it is not a well-formed event."""
    if not line or line[0] != "{":
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if not isinstance(event, dict) or not all(k in event for k in REQUIRED_KEYS):
        return None
    if not isinstance(event["values"], dict):
        return None
    return event


class MetricsReader:
    """Tails one metrics file.

    Args:
        path: the JSON-lines file (it may not exist yet: it reads as empty).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        #: how many malformed lines were skipped so far
        self.skipped = 0

    def read(
        self, since: int = 0, max_bytes: int | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """Read the events written after byte offset ``since``.

        Args:
            since: 0, or the cursor a previous read returned.
            max_bytes: stop after about this many bytes (None: read everything there
                is); the rest comes with the next read from the returned cursor. An
                event longer than the budget is still returned whole.

        Returns:
            ``(events, cursor)``: events in file order and the offset to read from next.
        """
        events: list[dict[str, Any]] = []
        cursor = since
        budget = max_bytes
        limit = CHUNK_BYTES if budget is None else max(1, min(CHUNK_BYTES, budget))
        while True:
            lines, new_cursor, more = read_lines(self.path, cursor, limit)
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
            if budget is not None:
                budget -= new_cursor - cursor
            cursor = new_cursor
            if not more or (budget is not None and budget <= 0):
                return events, cursor
            limit = CHUNK_BYTES if budget is None else max(1, min(CHUNK_BYTES, budget))

    def read_all(self) -> list[dict[str, Any]]:
        """Every complete event in the file."""
        return self.read(0)[0]


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
