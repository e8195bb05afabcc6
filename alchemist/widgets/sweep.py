"""The live sweep monitor: what a ``%%alchemist_sweep`` cell shows while its trials run.

One chart with every trial's curve of the objective (the best trial drawn thick, pruned
and failed ones faded), a table of the trials sorted by the objective (setting, state,
step, value, duration, why it stopped), and the best setting as a one-line answer. It
reads the sweep's ``trials.json`` (written by its driver) and each trial's metrics files
with one cursor per trial, so attaching after a kernel restart rebuilds every curve.

``SweepMonitor(sweep).follow()`` (or ``await ....follow_async()``) updates it until the
sweep ends; where widgets cannot render it shows as HTML (an inline SVG of the curves)
or text. Charts are bqplot's, as in :mod:`alchemist.widgets.monitor`.
"""

from __future__ import annotations

import asyncio
import html
import math
import time
from typing import Any

from alchemist.job import config
from alchemist.job.jobdir import JobDir
from alchemist.metrics.reader import MetricsReader
from alchemist.sweep.api import Sweep
from alchemist.sweep.text import (
    LIVE_STATES,
    best_line,
    counts,
    format_sweep,
    setting,
    sorted_trials,
)

DEFAULT_INTERVAL = 0.5
#: Points kept per trial's curve (older points thinned by half when it is exceeded).
MAX_POINTS = 2000
_BEST, _LIVE, _DONE, _FADED = "#d62728", "#1f77b4", "#7f7f7f", "#c7c7c7"


def _duration(t: dict[str, Any]) -> float | None:
    if not t.get("started"):
        return None
    return (t.get("finished") or time.time()) - t["started"]


class SweepData:
    """What the views show: the driver's view, the sweep's state and every trial's curve."""

    def __init__(self, sweep: Sweep) -> None:
        self.sweep = sweep
        self.view: dict[str, Any] = {"trials": [], "best": None}
        self.state: dict[str, Any] = {"state": "running"}
        self.curves: dict[int, tuple[list[float], list[float]]] = {}
        self._cursors: dict[int, str | None] = {}
        self._done_reading: set[int] = set()

    @property
    def finished(self) -> bool:
        return self.state["state"] != "running" or not self.state.get("driver", True)

    def poll(self) -> bool:
        """Read what is new; True if anything changed."""
        view, state = self.sweep.view(), self.sweep.state()
        changed = view != self.view or state != self.state
        self.view, self.state = view, state
        objective = self.sweep.spec.objective
        for t in view["trials"]:
            n = t["number"]
            if not t.get("job_id") or n in self._done_reading:
                continue
            reader = MetricsReader(JobDir(config.jobs_root() / t["job_id"]))
            try:
                events, self._cursors[n] = reader.read(self._cursors.get(n), max_bytes=4 << 20)
            except Exception:  # a job directory being made, or gone: next time
                continue
            xs, ys = self.curves.setdefault(n, ([], []))
            for e in events:
                v = e["values"].get(objective)
                if e["rank"] == 0 and v is not None and e["step"] is not None and math.isfinite(v):
                    xs.append(float(e["step"]))
                    ys.append(float(v))
                    changed = True
            if len(xs) > MAX_POINTS:
                xs[:] = xs[::2]
                ys[:] = ys[::2]
            if t["state"] not in LIVE_STATES:
                self._done_reading.add(n)
        return changed


def header_html(d: SweepData) -> str:
    s = d.sweep.spec
    c = counts(d.view["trials"])
    c["running"] = sum(c.get(k, 0) for k in LIVE_STATES)
    parts = [
        f"{c[k]} {k}" for k in ("complete", "pruned", "running", "failed", "waiting") if c.get(k)
    ]
    state = d.state["state"]
    reason = d.state.get("reason")
    colour = {"failed": "#d62728", "cancelled": "#7f7f7f", "succeeded": "#2ca02c"}.get(state, "")
    head = (
        f"<b>sweep {html.escape(s.name)}</b> <code>{d.sweep.id}</code> ·"
        f" <span style='color:{colour}'>{state}</span> · {len(d.view['trials'])} of {s.trials}"
        f" trials ({', '.join(parts) or 'starting'}) · {s.mode}imise <b>{html.escape(s.objective)}</b>"
        f" · {s.sampler} search, {s.pruner} pruner, {s.parallel} at once"
    )
    if reason:
        head += f"<br><span style='color:{colour or '#555'}'>{html.escape(reason)}</span>"
    return head


def table_html(d: SweepData) -> str:
    rows = []
    best = (d.view.get("best") or {}).get("number")
    for t in sorted_trials(d.view["trials"], d.sweep.spec.mode):
        value = "" if t.get("value") is None else f"{t['value']:.4g}"
        dur = _duration(t)
        style = " style='font-weight:bold'" if t["number"] == best else ""
        if t["state"] in ("pruned", "failed"):
            style = " style='color:#999'"
        rows.append(
            f"<tr{style}><td>{t['number']}</td><td>{html.escape(setting(t['params']))}</td>"
            f"<td>{t['state']}</td><td>{'' if t.get('step') is None else t['step']}</td>"
            f"<td>{value}</td><td>{'' if dur is None else f'{dur:.1f} s'}</td>"
            f"<td><code>{t.get('job_id') or ''}</code></td>"
            f"<td>{html.escape(t.get('reason') or '')}</td></tr>"
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in ("#", "setting", "state", "step", d.sweep.spec.objective, "time", "job", "why")
    )
    return (
        "<table class='alchemist-sweep-table'><thead><tr>"
        + head
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def curves_svg(d: SweepData, width: int = 480, height: int = 200) -> str:
    points = [(x, y) for xs, ys in d.curves.values() for x, y in zip(xs, ys, strict=True)]
    if not points:
        return ""
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(p[1] for p in points), max(p[1] for p in points)
    sx = (width - 10) / ((x1 - x0) or 1)
    sy = (height - 10) / ((y1 - y0) or 1)
    lines = []
    for t in d.view["trials"]:
        xs, ys = d.curves.get(t["number"], ([], []))
        if not xs:
            continue
        colour, w = _colour(d, t)
        path = " ".join(
            f"{5 + (x - x0) * sx:.1f},{height - 5 - (y - y0) * sy:.1f}"
            for x, y in zip(xs, ys, strict=True)
        )
        lines.append(
            f"<polyline points='{path}' fill='none' stroke='{colour}' stroke-width='{w}'/>"
        )
    return f"<svg width='{width}' height='{height}'>{''.join(lines)}</svg>"


def _colour(d: SweepData, t: dict[str, Any]) -> tuple[str, float]:
    if t["number"] == (d.view.get("best") or {}).get("number"):
        return _BEST, 3.0
    if t["state"] in ("pruned", "failed", "cancelled"):
        return _FADED, 1.0
    return (_LIVE, 1.5) if t["state"] in LIVE_STATES else (_DONE, 1.5)


class SweepMonitor:
    """The live sweep widget (see the module docstring)."""

    def __init__(self, sweep: Sweep, interval: float = DEFAULT_INTERVAL) -> None:
        self.sweep = sweep
        self.interval = interval
        self.data = SweepData(sweep)
        self._widget: Any = None
        self._marks: dict[int, Any] = {}
        self.update()

    def update(self) -> bool:
        changed = self.data.poll()
        if changed and self._widget is not None:
            self._render()
        return changed

    def display(self) -> None:
        from IPython.display import display

        self._handle = display(self, display_id=True)

    def _final(self) -> None:
        """Replace the shown output by the final one (a saved notebook keeps the end)."""
        handle = getattr(self, "_handle", None)
        if handle is not None:
            handle.update(self)

    def follow(self, timeout: float | None = None) -> dict[str, Any]:
        """Update until the sweep ends (or ``timeout`` s); returns its state."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.data.finished and (deadline is None or time.monotonic() < deadline):
            time.sleep(self.interval)
            self.update()
        self.update()
        self._final()
        return self.data.state

    async def follow_async(self, timeout: float | None = None) -> dict[str, Any]:
        """:meth:`follow` that awaits between updates (the Cancel button works meanwhile)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.data.finished and (deadline is None or time.monotonic() < deadline):
            await asyncio.sleep(self.interval)
            self.update()
        self.update()
        self._final()
        return self.data.state

    def cancel(self) -> None:
        self.sweep.cancel()
        self.update()

    # -- views -----------------------------------------------------------------------
    def _repr_html_(self) -> str:
        d = self.data
        return (
            f"<div class='alchemist-sweep'>{header_html(d)}<br><b>{html.escape(best_line(d.view.get('best'), d.sweep.spec.objective))}</b>"
            f"<br>{curves_svg(d)}{table_html(d)}</div>"
        )

    def __repr__(self) -> str:
        return format_sweep(self.sweep)

    def _repr_mimebundle_(self, **_kwargs: Any) -> dict[str, Any]:
        bundle = {"text/plain": repr(self), "text/html": self._repr_html_()}
        try:
            widget = self.widget
        except ImportError:
            return bundle
        return {**widget._repr_mimebundle_(), **bundle}  # our text and HTML where no widget shows

    @property
    def widget(self) -> Any:
        if self._widget is None:
            self._build()
        return self._widget

    def _build(self) -> None:
        import bqplot as bq
        import ipywidgets as w

        self._bq = bq
        self._header = w.HTML()
        self._best = w.HTML()
        self._table = w.HTML()
        self._cancel_button = w.Button(
            description="Cancel sweep", button_style="danger", icon="stop"
        )
        self._cancel_button.on_click(lambda _b: self.cancel())
        self._xs, self._ys = bq.LinearScale(min=0.0), bq.LinearScale()
        self._figure = bq.Figure(
            title=self.sweep.spec.objective,
            axes=[
                bq.Axis(scale=self._xs, label="step", tick_format="~s", num_ticks=5),
                bq.Axis(scale=self._ys, orientation="vertical", tick_format=".3g", num_ticks=5),
            ],
            fig_margin={"top": 40, "bottom": 40, "left": 60, "right": 10},
            layout=w.Layout(width="560px", height="300px"),
            animation_duration=0,
        )
        self._figure.add_class("alchemist-sweep-chart")
        self._widget = w.VBox(
            [self._header, self._cancel_button, self._best, self._figure, self._table]
        )
        self._widget.add_class("alchemist-sweep")
        self._render()

    def _render(self) -> None:
        d = self.data
        self._header.value = header_html(d)
        self._best.value = (
            f"<b>{html.escape(best_line(d.view.get('best'), d.sweep.spec.objective))}</b>"
        )
        self._table.value = table_html(d)
        self._cancel_button.disabled = d.finished
        marks = []
        for t in d.view["trials"]:
            xs, ys = d.curves.get(t["number"], ([], []))
            colour, width = _colour(d, t)
            mark = self._marks.get(t["number"])
            if mark is None:
                mark = self._bq.Lines(
                    scales={"x": self._xs, "y": self._ys}, labels=[f"trial {t['number']}"]
                )
                self._marks[t["number"]] = mark
            with mark.hold_sync():
                mark.x, mark.y = list(xs), list(ys)
                mark.colors = [colour]
                mark.stroke_width = width
                mark.opacities = [0.5 if colour == _FADED else 1.0]
            marks.append(mark)
        if len(marks) != len(self._figure.marks):
            self._figure.marks = marks
