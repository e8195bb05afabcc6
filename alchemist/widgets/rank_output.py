"""A ``%%alchemist_px`` cell's output in a notebook: each rank's lines, filterable by rank.

:class:`RankOutput` is the *view* a session's :meth:`~alchemist.interactive.Session.run`
streams into (``show(lines)`` while the cell runs, ``close()`` once when it ends; see
:func:`alchemist.interactive.output.view`). It shows a row of toggle buttons ("all
ranks", "rank 0", "rank 1", ... for the cell's target ranks only) above a scrolling
``<pre>`` of the lines, each prefixed ``[rank r]``, each rank's lines in the order that
rank wrote them. Picking a rank shows only its lines; the filter is answered by the
kernel, so it works while the kernel is idle (after the cell, as in a finished one).

The text area is an ``ipywidgets.HTML`` holding an escaped ``<pre>`` (as the job
monitor's log tail): it renders as plain read-only text with no edit cursor, and its
scroll box is anchored at the bottom (``flex-direction: column-reverse``), so the
newest lines are in view as they arrive. A ``Textarea`` would be editable (or greyed
out when disabled) and would scroll back to the top on every update.

Bounds: the widget keeps the last ``max_lines`` lines (default 500) of all ranks
together and of each rank, each line cut at ``max_line_chars`` characters; a note under
the area says when lines were left out. Every line is in the session's
``logs/rank-<r>.log`` (``alchemist logs ID --rank r``). Updates are throttled: the
shown text is re-sent at most once per ``interval`` seconds (default 0.1, so at most
~10 messages a second, each at most ``max_lines`` lines), only when what is shown
changed, and a last time on ``close()``.

Saved notebooks: the widget is displayed with a display id, and ``close()`` updates that
display so that its bundle holds the widget view *and* a ``text/plain`` of the lines
"all ranks" shows. A notebook run by nbclient/nbconvert, or opened where widgets do not
render, still shows every rank's lines as text.
"""

from __future__ import annotations

import collections
import html
import re
import time
from collections.abc import Iterable
from typing import Any

#: Lines kept (and shown) for all ranks together, and for each rank.
DEFAULT_MAX_LINES = 500
#: Characters kept of one line (a progress bar without newlines makes very long ones).
DEFAULT_MAX_LINE_CHARS = 2000
#: Seconds between two updates sent to the browser at least.
DEFAULT_INTERVAL = 0.1
#: The filter value of "all ranks".
ALL = -1

# Terminal colour and cursor codes: shown as text they would be noise in the HTML view.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def _clean(line: str, max_chars: int) -> str:
    """What a terminal would show of ``line``: the text after its last carriage return
    (a progress bar redraws itself with ``\\r``), cut at ``max_chars`` characters."""
    line = line.rstrip("\r").rsplit("\r", 1)[-1]
    if len(line) > max_chars:
        line = line[:max_chars] + f"… ({len(line) - max_chars} more characters)"
    return line


class RankOutput:
    """The ranks' output lines of one cell, live, with a rank filter (module docstring).

    Args:
        ranks: the cell's target ranks (one filter button each).
        max_lines: lines kept for all ranks together, and for each rank.
        max_line_chars: characters kept of one line.
        interval: seconds between two updates sent to the browser at least.
        session_id: the session, named in the note about lines left out.
    """

    def __init__(
        self,
        ranks: Iterable[int],
        *,
        max_lines: int = DEFAULT_MAX_LINES,
        max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
        interval: float = DEFAULT_INTERVAL,
        session_id: str | None = None,
    ) -> None:
        if max_lines < 1:
            raise ValueError(f"max_lines must be at least 1, not {max_lines}")
        self.ranks = sorted(set(ranks))
        self.max_lines = max_lines
        self.max_line_chars = max_line_chars
        self.interval = interval
        self.session_id = session_id
        self._all: collections.deque[tuple[int, str]] = collections.deque(maxlen=max_lines)
        self._by_rank: dict[int, collections.deque[str]] = {
            r: collections.deque(maxlen=max_lines) for r in self.ranks
        }
        #: lines received in all, per rank (kept or not)
        self.received: dict[int, int] = {r: 0 for r in self.ranks}
        self._dirty: set[int] = set()  # ranks with lines not yet sent to the browser
        self._last_sent = float("-inf")
        #: updates of the shown text sent so far (the throttle's tests count them)
        self.updates = 0
        self.closed = False
        self._handle: Any = None  # the IPython DisplayHandle, once displayed
        self._widget: Any = None

    # -- the view interface (Session.run calls these) -------------------------------------
    def show(self, lines: list[tuple[int, str]]) -> None:
        """Add ``(rank, line)`` pairs (each rank's in order); show them now, or at a later
        call once ``interval`` has passed since the last update (throttle)."""
        for r, line in lines:
            if r not in self._by_rank:  # not a target rank (no button), kept all the same
                self._by_rank[r] = collections.deque(maxlen=self.max_lines)
                self.received[r] = 0
            text = _clean(line, self.max_line_chars)
            self._all.append((r, text))
            self._by_rank[r].append(text)
            self.received[r] += 1
            self._dirty.add(r)
        if self._handle is None and lines:
            self.display()
        elif self._dirty and time.monotonic() - self._last_sent >= self.interval:
            self._render()

    def close(self) -> None:
        """The cell ended: send what is left, and update the display so that it holds the
        lines as ``text/plain`` too (saved notebooks, nbconvert). Idempotent."""
        if self.closed:
            return
        self.closed = True
        if self._handle is None:
            return  # no line came: nothing was displayed
        self._render(force=True)
        self._handle.update(self._bundle(), raw=True)

    # -- what is shown ---------------------------------------------------------------------
    @property
    def selected(self) -> int:
        """The rank whose lines show, or :data:`ALL`."""
        return int(self._filter.value) if self._widget is not None else ALL

    def select(self, rank: int | None) -> None:
        """Show only ``rank``'s lines (``None``: all ranks), as the buttons do."""
        value = ALL if rank is None else rank
        if value != ALL and value not in self._by_rank:
            raise ValueError(f"rank {rank} is not one of this cell's ranks {self.ranks}")
        _ = self.widget  # built, so that the filter exists
        self._filter.value = value  # observed: re-renders

    def lines(self, rank: int | None = None) -> list[str]:
        """The kept lines of ``rank`` (``None``: all ranks), each ``[rank r] ...``."""
        if rank is None or rank == ALL:
            return [f"[rank {r}] {line}" for r, line in self._all]
        return [f"[rank {rank}] {line}" for line in self._by_rank.get(rank, ())]

    def left_out(self, rank: int | None = None) -> int:
        """How many lines of ``rank`` (``None``: all ranks) are no longer kept."""
        if rank is None or rank == ALL:
            return sum(self.received.values()) - len(self._all)
        return self.received.get(rank, 0) - len(self._by_rank.get(rank, ()))

    def _note(self, rank: int | None) -> str:
        """One line about the lines left out ('' when none were)."""
        dropped = self.left_out(rank)
        if not dropped:
            return ""
        which = "--rank R" if rank is None or rank == ALL else f"--rank {rank}"
        return (
            f"{dropped} earlier line{'s' if dropped > 1 else ''} not shown (the last"
            f" {self.max_lines} are kept); every line: alchemist logs"
            f" {self.session_id or 'SESSION_ID'} {which}"
        )

    def text(self) -> str:
        """The lines "all ranks" shows, as text (the saved notebook's ``text/plain``)."""
        note = self._note(None)
        return "\n".join(([f"[{note}]"] if note else []) + self.lines(None))

    # -- widget ------------------------------------------------------------------------------
    @property
    def widget(self) -> Any:
        """The ipywidgets tree (built on first use)."""
        if self._widget is None:
            self._build()
        return self._widget

    def _build(self) -> None:
        import ipywidgets as w

        self._filter = w.ToggleButtons(
            options=[("all ranks", ALL)] + [(f"rank {r}", r) for r in self.ranks],
            value=ALL,
            style={"button_width": "auto"},
            tooltips=["every rank's lines"] + [f"only rank {r}'s lines" for r in self.ranks],
        )
        self._filter.add_class("alchemist-rank-filter")
        if len(self.ranks) < 2:  # one rank: nothing to filter
            self._filter.layout.display = "none"
        self._filter.observe(lambda _change: self._render(force=True), names="value")
        self._area = w.HTML()
        self._area.add_class("alchemist-rank-lines")
        self._footer = w.HTML()
        self._footer.add_class("alchemist-rank-note")
        self._widget = w.VBox([self._filter, self._area, self._footer])
        self._widget.add_class("alchemist-rank-output")
        self._render(force=True)

    def _render(self, force: bool = False) -> None:
        """Send the shown text if it changed (or ``force``)."""
        if self._widget is None:
            return
        rank = self.selected
        changed = bool(self._dirty) if rank == ALL else rank in self._dirty
        self._dirty.clear()  # lines of ranks not shown need no update now
        if not (changed or force):
            return
        body = html.escape(_ANSI.sub("", "\n".join(self.lines(rank))))
        value = (
            "<div class='alchemist-rank-scroll' style='max-height:24em;overflow-y:auto;"
            "display:flex;flex-direction:column-reverse'>"
            f"<pre style='margin:0;font-size:12px;white-space:pre-wrap'>{body}</pre></div>"
        )
        note = self._note(None if rank == ALL else rank)
        footer = f"<small style='color:#777'>{html.escape(note)}</small>" if note else ""
        self._area.value = value  # a trait: sent only when it changed
        self._footer.value = footer
        self._last_sent = time.monotonic()
        self.updates += 1

    # -- display -----------------------------------------------------------------------------
    def display(self) -> None:
        """Display the widget in the current cell, with a display id (``close()`` updates
        that display with the final text)."""
        from IPython.display import display

        _ = self.widget  # built (and rendered) before it is shown
        self._handle = display(self._bundle(), raw=True, display_id=True)

    def _bundle(self) -> dict[str, Any]:
        bundle: dict[str, Any] = dict(self.widget._repr_mimebundle_() or {})
        bundle["text/plain"] = self.text()
        return bundle

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self._bundle()

    def __repr__(self) -> str:
        return self.text()
