"""A cell's output, read from the ranks' logs and shown with a rank prefix.

Each engine's output goes to its ``logs/rank-<r>.log`` (C-level and subprocess output
too). A cell's output is what each log gained since the cell was sent: a
:class:`RankStreams` remembers each log's size at that moment and hands out the new
complete lines, in order per rank, until the cell ends (then the last partial line too).
:func:`view` says where they show: in a notebook the rank-filterable widget of
:mod:`alchemist.widgets.rank_output`, elsewhere printed lines with a ``[rank r]`` prefix.

What a rank displays (``display()``) and its last expression's value come over
ipyparallel's iopub channel instead, as mime bundles: :func:`show_values` prints their
text with the rank prefix, or, in a notebook, displays HTML and images as they are.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any, Protocol, TextIO

from alchemist.job.jobdir import JobDir


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


class View(Protocol):
    """Where a cell's streamed lines show (:meth:`Session.run` feeds one per cell)."""

    def show(self, lines: list[tuple[int, str]]) -> None:
        """Show ``(rank, line)`` pairs; called many times, each rank's lines in order."""

    def close(self) -> None:
        """The cell ended (also when it failed or was interrupted): called once."""


class TextView:
    """Where a cell's streamed lines show outside a notebook: printed with a prefix."""

    def show(self, lines: list[tuple[int, str]]) -> None:
        show(lines)

    def close(self) -> None:
        """The cell ended: nothing more will be shown."""


#: Set to 1 to print a cell's lines as text in a notebook too, instead of the widget.
TEXT_ENV = "ALCHEMIST_PX_TEXT"


def view(ranks: list[int], session_id: str | None = None) -> View:
    """Where a cell's streamed lines show: in a Jupyter kernel, the rank-filterable
    widget (:class:`alchemist.widgets.rank_output.RankOutput`); elsewhere (plain Python,
    a terminal IPython, ``ALCHEMIST_PX_TEXT=1``, no ipywidgets) printed lines."""
    if os.environ.get(TEXT_ENV, "").strip() not in ("", "0") or not _notebook():
        return TextView()
    try:
        import ipywidgets  # noqa: F401 - the widget is built from it
    except ImportError:  # no ipywidgets: the lines are printed
        return TextView()
    from alchemist.widgets.rank_output import RankOutput

    return RankOutput(ranks, session_id=session_id)


def _notebook() -> bool:
    """Whether a Jupyter kernel runs this (a frontend that renders HTML and images)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with ipyparallel
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def show_values(
    rank: int,
    displays: list[dict[str, Any]],
    result: dict[str, Any] | None,
    file: TextIO | None = None,
) -> None:
    """Show rank ``rank``'s displayed outputs and its last expression's value (``result``,
    an ``execute_result`` content): as ``[rank r]`` text lines (the value's first line
    after ``Out:``), or, in a notebook, a bundle richer than text displayed as it is
    after a ``[rank r]`` line."""
    out = file or sys.stdout
    bundles = [(d.get("data") or {}, d.get("metadata") or {}, "") for d in displays]
    if result and result.get("data"):
        bundles.append((result["data"], result.get("metadata") or {}, "Out: "))
    for data, metadata, label in bundles:
        if file is None and _notebook() and set(data) - {"text/plain"}:
            from IPython.display import display

            out.write(f"[rank {rank}] {label or 'display:'}\n")
            out.flush()
            display(data, raw=True, metadata=metadata)
            continue
        text = str(data.get("text/plain", "")).splitlines() or [""]
        show([(rank, label + text[0]), *((rank, line) for line in text[1:])], file=out)
