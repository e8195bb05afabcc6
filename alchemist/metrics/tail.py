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


#: Bytes read backwards at a time when looking for the last lines.
TAIL_BLOCK = 64 << 10


def read_tail(path: Path, lines: int, max_bytes: int = 1 << 20) -> tuple[list[str], int, bool]:
    """The last ``lines`` complete lines of ``path``, read from its end.

    The cost depends on ``lines`` (and ``max_bytes``), not on the file's size: blocks
    are read backwards from the end until enough newlines are found. A line the writer
    has only half written is not returned; the cursor stops before it, so
    :func:`read_lines` from the cursor follows the file without a gap or a repeat.

    Args:
        path: the file; a missing file reads as empty.
        lines: how many lines at most (0: none, only the cursor at the end).
        max_bytes: look back this far at most (a bound for very long lines).

    Returns:
        ``(lines, cursor, earlier)``: the lines without their newline (decoded as
        UTF-8, undecodable bytes replaced), the cursor to follow from, and whether the
        file has lines (or bytes) before the ones returned.

    Raises:
        ValueError: ``lines`` or ``max_bytes`` is negative.
    """
    if lines < 0 or max_bytes < 0:
        raise ValueError(f"lines and max_bytes must be >= 0, got {lines} and {max_bytes}")
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return [], 0, False
    with f:
        size = f.seek(0, 2)
        # one byte more than max_bytes: whether the first line read starts a line
        floor = max(0, size - max_bytes - 1)
        begin, data = size, b""
        # lines + 1 newlines: the one before the first line returned, and one a line
        while begin > floor and data.count(b"\n") <= lines:
            start = max(floor, begin - TAIL_BLOCK)
            f.seek(start)
            data = f.read(begin - start) + data
            begin = start
    last = data.rfind(b"\n")
    if last < 0:  # no line ends within reach: follow from the end
        return [], size if begin > 0 else 0, begin > 0
    cursor = begin + last + 1
    complete = data[: last + 1]
    if begin > 0:  # the first piece may have started before what was read
        complete = complete[complete.find(b"\n") + 1 :]
    parts = complete.decode("utf-8", "replace").split("\n")[:-1]
    earlier = begin > 0
    if len(parts) > lines:
        parts = parts[len(parts) - lines :] if lines else []
        earlier = True
    return parts, cursor, earlier
