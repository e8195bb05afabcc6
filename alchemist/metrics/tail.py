"""Read whole lines from a file that another process is appending to.

A cursor is a byte offset. A read returns only complete lines (ending in a newline) and
the cursor just past the last one, so a line that a writer has half written is read
whole on a later call, never twice and never in pieces.
"""

from __future__ import annotations

from pathlib import Path


def read_lines(
    path: Path, since: int = 0, limit_bytes: int = 1 << 20
) -> tuple[list[str], int, bool]:
    """Read complete lines of ``path`` from byte offset ``since``.

    Args:
        path: the file; a missing file reads as empty.
        since: the cursor returned by the previous call (0 to start).
        limit_bytes: read at most this many bytes; the rest waits for the next call.

    Returns:
        ``(lines, cursor, more)``: the lines without their newline (decoded as UTF-8,
        undecodable bytes replaced), the cursor for the next call, and whether more
        complete data was already waiting beyond the limit.
    """
    try:
        with open(path, "rb") as f:
            f.seek(since)
            data = f.read(limit_bytes + 1)
    except FileNotFoundError:
        return [], since, False
    more = len(data) > limit_bytes
    data = data[:limit_bytes]
    end = data.rfind(b"\n")
    if end < 0:
        if more:  # one line longer than the limit: hand it out in pieces rather than stall
            return [data.decode("utf-8", "replace")], since + len(data), True
        return [], since, False
    chunk = data[: end + 1]
    lines = chunk.decode("utf-8", "replace").split("\n")[:-1]
    return lines, since + len(chunk), more
