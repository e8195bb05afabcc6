"""The live job monitor: what a ``%%alchemist_distributed`` cell shows while it runs.

Entry points (what the magics and users call):

- ``JobMonitor(job).display()`` shows the monitor in the cell and keeps it updating on
  a background thread while the kernel is free (reattaching, ``alchemist.attach``).
- ``await JobMonitor(job).follow_async(timeout=None) -> JobStatus`` keeps the cell
  running until the job ends, updating the monitor from the cell itself, and returns
  the final status. It awaits between updates, so the kernel's event loop is free and
  ipykernel (7.4+) dispatches widget events meanwhile: the Cancel and TensorBoard
  buttons work while the cell runs. The magics use it in a Jupyter kernel (see
  :func:`alchemist.magics.run_async`). ``follow()`` is the blocking twin (a terminal,
  a script): while it blocks the kernel handles no widget events.
- ``JobMonitor(job).update()`` reads what is new once (tests, custom loops).
- Where widgets cannot render (nbconvert, a terminal IPython) the monitor displays as
  HTML (``_repr_html_``: header, per-metric summaries with inline SVG curves, progress,
  system metrics, log tail) or plain text (``repr``).

Charting library: bqplot (the ipywidgets-native plotting library, maintained by the
bqplot organisation; its front end ships once as a JupyterLab extension). plotly's
``FigureWidget`` was tried first and rejected: since plotly 6 it is an ``anywidget``
whose ~5 MB JavaScript bundle travels in every figure's ``comm_open``, and JupyterLab
handles kernel messages one after the other, so the whole monitor froze for seconds
in a real browser until that bundle was loaded (seen in the browser test). bqplot
sends numpy arrays as binary buffers. Updates are incremental: every ``interval``
seconds (about 7 per second by default) only the curves that gained points are re-sent,
each as its downsampled view (:mod:`alchemist.metrics.downsample`: at most
``max_points`` points keeping first/last/extremes), never one message per point.

Attaching to a long history costs what a chart shows, not what the job logged: the
first poll reads :meth:`~alchemist.metrics.reader.MetricsReader.overview` (every metric
of every rank downsampled, from the cached summaries of :mod:`alchemist.metrics.summary`
plus the bytes after them) and seeds each curve with it; from the overview's cursor on,
every new point is read and kept in memory (the history before it stays in the job's
metrics files, as the summary's points in the curves). A history too long to fold
within one update's budget (no summary yet) arrives over a few updates, still as
overviews, before new points are read one by one. System metrics are read from the
last :data:`SYSTEM_TAIL_BYTES` of each rank's file.

The monitor is written against the small :class:`MonitoredJob` protocol (what
:class:`alchemist.client.Job` provides), and reads the job directory directly:
every rank's metrics and system metrics files through
:class:`~alchemist.metrics.reader.MetricsReader` with one cursor each, logs through
``job.log_chunk`` with a cursor per rank. Reattaching after a kernel restart therefore
rebuilds the whole history from the files.
"""

from __future__ import annotations

import asyncio
import collections
import html
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from alchemist.bundle.sizes import human_size
from alchemist.job.jobdir import JobDir
from alchemist.job.spec import JobState, JobStatus
from alchemist.metrics.attempts import AttemptTracker
from alchemist.metrics.downsample import Series
from alchemist.metrics.events import META_KEYS
from alchemist.metrics.reader import MetricsOverview, MetricsReader
from alchemist.widgets.diagnosis import bundle_link_html, diagnosis_html, error_html

DEFAULT_INTERVAL = 0.15
DEFAULT_MAX_POINTS = 2000
DEFAULT_LOG_LINES = 200
#: Bytes of metrics read per update at most (a long history arrives over a few updates).
READ_BUDGET = 16 << 20
#: On attach, only the end of each rank log is read (the tail shows the last lines).
LOG_TAIL_BYTES = 256 << 10
#: On attach, only the end of each rank's system metrics is read (the table shows the
#: latest sample, and the one before for network rates).
SYSTEM_TAIL_BYTES = 64 << 10
STATUS_EVERY = 1.0
#: The step axis spans at least 0..this, so its ticks stay on whole steps.
MIN_STEP_AXIS = 10

_STATE_COLOURS = {
    "pending": "#888",
    "queued": "#bcbd22",
    "running": "#1f77b4",
    "restarting": "#ff7f0e",
    "succeeded": "#2ca02c",
    "failed": "#d62728",
    "cancelled": "#7f7f7f",
}


class MonitoredJob(Protocol):
    """What the monitor needs from a job (``alchemist.client.Job`` provides it)."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def job_dir(self) -> JobDir: ...

    def status(self) -> JobStatus: ...

    def log_chunk(self, rank: int, since: int = 0, limit_bytes: int = 1 << 20) -> Any: ...

    def cancel(self) -> None: ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass
class RankProgress:
    """What one rank has logged so far."""

    step: int | None = None
    time: float | None = None
    total_steps: float | None = None
    batch_size: float | None = None
    events: int = 0
    recent: collections.deque[tuple[float, int]] = field(
        default_factory=lambda: collections.deque(maxlen=20)
    )

    def steps_per_second(self) -> float | None:
        """Throughput over the last (up to 20) events of this rank."""
        if len(self.recent) < 2:
            return None
        (t0, s0), (t1, s1) = self.recent[0], self.recent[-1]
        if t1 <= t0 or s1 <= s0:
            return None
        return (s1 - s0) / (t1 - t0)

    def samples_per_second(self) -> float | None:
        sps = self.steps_per_second()
        return sps * self.batch_size if sps is not None and self.batch_size else None


@dataclass
class Changes:
    """What one :meth:`MonitorData.poll` found new (the widget redraws only these)."""

    series: set[tuple[str, int]] = field(default_factory=set)
    new_metrics: list[str] = field(default_factory=list)
    progress: bool = False
    system: bool = False
    logs: bool = False
    status: bool = False

    def __bool__(self) -> bool:
        return (
            bool(self.series or self.new_metrics or self.progress or self.system or self.logs)
            or self.status
        )


class MonitorData:
    """Everything the monitor shows, read incrementally from the job (no widgets here).

    Args:
        job: the job to follow.
        max_points: display budget per curve (stored points are never dropped).
        log_lines: how many log lines are kept for the tail (per rank, and for "all").
    """

    def __init__(
        self,
        job: MonitoredJob,
        max_points: int = DEFAULT_MAX_POINTS,
        log_lines: int = DEFAULT_LOG_LINES,
    ) -> None:
        self.job = job
        self.info = job.to_dict()
        self.max_points = max_points
        self.world_size = int(self.info.get("world_size") or _world_size(self.info) or 1)
        self.series: dict[tuple[str, int], Series] = {}
        self.metrics: list[str] = []  # in order of first appearance
        self.progress: dict[int, RankProgress] = {}
        self.system: dict[int, dict[str, Any]] = {}
        self._net_rate: dict[int, tuple[float, float]] = {}
        self.logs_all: collections.deque[tuple[int, str]] = collections.deque(maxlen=log_lines)
        self.logs_by_rank: dict[int, collections.deque[str]] = collections.defaultdict(
            lambda: collections.deque(maxlen=log_lines)
        )
        self.status: JobStatus = JobStatus(
            state=JobState(self.info.get("state", "pending")),
            reason=self.info.get("reason"),
            started=self.info.get("started"),
            finished=self.info.get("finished"),
            restarts=int(self.info.get("restarts") or 0),
        )
        self._attempts = AttemptTracker()
        self._metrics_reader = MetricsReader(job.job_dir)
        self._system_reader = MetricsReader(job.job_dir, system=True)
        # Opaque cursors over every rank's file (see alchemist.metrics.reader).
        self.metrics_cursor = ""
        self.system_cursor: str | None = None  # None: start from the files' tails
        #: whether the history before :attr:`metrics_cursor` has been read (as overviews)
        self.history_read = False
        self.log_cursors: dict[int, int] = {}
        self._last_status = 0.0
        self.finished_reading = False
        #: the job's stall note while it runs and no rank advanced (``Job.stalled``)
        self.stalled: str | None = None

    # -- reading ------------------------------------------------------------------------
    def poll(self, force_status: bool = False) -> Changes:
        """Read what is new since the last poll; return what changed."""
        changes = Changes()
        now = time.monotonic()
        was_terminal = self.status.state.is_terminal
        if not was_terminal and (force_status or now - self._last_status >= STATUS_EVERY):
            self._last_status = now
            status = self.job.status()
            if status.to_dict() != self.status.to_dict():
                changes.status = True
            self.status = status
            stalled = _stall_note(self.job, status)
            if stalled != self.stalled:
                changes.status = True
            self.stalled = stalled
        if not self.history_read:
            overview = self._metrics_reader.overview(self.max_points, max_bytes=READ_BUDGET)
            self._seed(overview, changes)
            self.metrics_cursor = overview.cursor
            self.history_read = overview.complete
            events: list[dict[str, Any]] = []
        else:
            events, self.metrics_cursor = self._metrics_reader.read(
                self.metrics_cursor, max_bytes=READ_BUDGET
            )
            self._add_events(events, changes)
        if self.system_cursor is None:
            self.system_cursor = self._system_reader.tail_cursor(SYSTEM_TAIL_BYTES)
        sys_events, self.system_cursor = self._system_reader.read(self.system_cursor)
        for e in sys_events:
            self._add_system(e)
        changes.system = bool(sys_events)
        changes.logs = self._read_logs()
        # Terminal and drained: nothing more will come.
        self.finished_reading = (
            self.status.state.is_terminal and self.history_read and not events and not sys_events
        )
        return changes

    def _seed(self, overview: MetricsOverview, changes: Changes) -> None:
        """Show the history as ``overview`` summarises it (every curve replaced)."""
        self._attempts = AttemptTracker(overview.attempts)
        for name in overview.metrics:
            if name not in self.metrics:
                self.metrics.append(name)
                changes.new_metrics.append(name)
        for key, points in overview.series.items():
            series = self.series.get(key)
            if series is None:
                series = self.series[key] = Series(self.max_points)
            series.seed(points.steps, points.values, points.logged)
            changes.series.add(key)
        for rank, p in overview.progress.items():
            prog = self.progress[rank] = RankProgress(
                step=p.get("step"),
                time=p.get("time"),
                total_steps=p.get("total_steps"),
                batch_size=p.get("batch_size"),
                events=int(p.get("events") or 0),
            )
            prog.recent.extend((float(t), int(s)) for t, s in p.get("recent", ()))
            changes.progress = True

    def _add_events(self, events: Iterable[dict[str, Any]], changes: Changes) -> None:
        for e in events:
            rank, step = int(e["rank"]), e["step"]
            if step is None:
                continue
            cut = self._attempts.restart_at(e)
            if cut is not None:  # a restarted attempt redoes steps: show its values
                for key, curve in self.series.items():
                    if key[1] == rank and curve.drop_from(cut):
                        changes.series.add(key)
            prog = self.progress.setdefault(rank, RankProgress())
            wall = float(e.get("time") or 0.0)
            prog.step, prog.time = int(step), wall
            prog.events += 1
            prog.recent.append((wall, int(step)))
            changes.progress = True
            for name, value in e["values"].items():
                if name in META_KEYS:
                    setattr(prog, name, float(value))
                    continue
                key = (name, rank)
                series = self.series.get(key)
                if series is None:
                    series = self.series[key] = Series(self.max_points)
                    if name not in self.metrics:
                        self.metrics.append(name)
                        changes.new_metrics.append(name)
                series.append(float(step), float(value))
                changes.series.add(key)

    def _add_system(self, e: dict[str, Any]) -> None:
        rank = int(e["rank"])
        values = dict(e["values"])
        t = float(e.get("time") or 0.0)
        sent, recv = values.get("net_sent_bytes"), values.get("net_recv_bytes")
        prev = self.system.get(rank)
        if prev is not None and sent is not None and recv is not None:
            dt = t - float(prev["time"])
            if dt > 0:
                pv = prev["values"]
                values["net_sent_rate"] = max(0.0, (sent - pv.get("net_sent_bytes", sent)) / dt)
                values["net_recv_rate"] = max(0.0, (recv - pv.get("net_recv_bytes", recv)) / dt)
        self.system[rank] = {"host": e.get("host", "?"), "time": t, "values": values}

    def _read_logs(self) -> bool:
        """Read what each rank's log gained, at most :data:`LOG_TAIL_BYTES` a rank a poll.
        A rank whose log grew faster than that (a flood of prints) is caught up by a
        jump to its tail, with a line saying how much was skipped: the pane always
        reaches the newest lines, and shows the last ones when the job ends."""
        got = False
        for rank in range(self.world_size):
            cursor = self.log_cursors.get(rank)
            try:
                size = self.job.job_dir.rank_log(rank).stat().st_size
            except OSError:
                size = 0
            skip_first = False
            skipped = 0
            if cursor is None or size - cursor > LOG_TAIL_BYTES:
                start = max(0, size - LOG_TAIL_BYTES)
                skipped = 0 if cursor is None else start - cursor
                cursor = start
                skip_first = cursor > 0  # started mid-line: drop the piece
            chunk = self.job.log_chunk(rank, cursor, LOG_TAIL_BYTES)
            lines = list(chunk.lines)
            if skip_first and lines:
                lines = lines[1:]
            if skipped > 0:  # the note, then as many of the newest lines as are kept
                keep = (self.logs_by_rank[rank].maxlen or len(lines) + 1) - 1
                lines = [
                    f"[alchemist] {human_size(skipped)} of rank {rank}'s log skipped here"
                    f" (written faster than shown; alchemist logs {self.info.get('id', 'ID')}"
                    f" --rank {rank} has all of it)",
                    *(lines[-keep:] if keep > 0 else []),
                ]
            self.log_cursors[rank] = chunk.cursor
            for line in lines:
                self.logs_all.append((rank, line))
                self.logs_by_rank[rank].append(line)
            got = got or bool(lines)
        return got

    # -- derived values -----------------------------------------------------------------
    def elapsed(self) -> float | None:
        st = self.status
        if st.started is None:
            return None
        end = st.finished if st.finished is not None else time.time()
        return max(0.0, end - st.started)

    def log_tail(self, rank: int | None = None, lines: int | None = None) -> list[str]:
        """The kept log lines, of one rank or of all (prefixed ``[rank r]``)."""
        if rank is None:
            out = [f"[rank {r}] {line}" for r, line in self.logs_all]
        else:
            out = list(self.logs_by_rank.get(rank, ()))
        return out[-lines:] if lines else out

    def points(self, metric: str, rank: int = 0) -> int:
        """How many points of ``metric`` rank ``rank`` has logged."""
        s = self.series.get((metric, rank))
        return s.count if s is not None else 0


def _stall_note(job: MonitoredJob, status: JobStatus) -> str | None:
    """The job's stall note (``Job.stalled``: the tails of its metrics files, read on the
    status poll, once a second); None for a job without one (a stand-in) or not running."""
    stalled = getattr(job, "stalled", None)
    if stalled is None or status.state != JobState.RUNNING:
        return None
    try:
        note = stalled(status)
    except Exception:  # a vanished job directory: no note, not a broken monitor
        return None
    return str(note) if note else None


def _world_size(info: dict[str, Any]) -> int | None:
    spec = info.get("spec") or {}
    workers = spec.get("workers")
    if workers is None:
        return None
    gpus = (spec.get("resources") or {}).get("gpus") or 0
    return int(workers) * max(1, int(gpus))


# -- formatting (shared by the widget and the HTML/text fallback) ----------------------------
def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def fmt_num(v: float | None) -> str:
    if v is None:
        return "-"
    if math.isnan(v) or math.isinf(v):
        return str(v)
    return f"{v:.4g}"


def header_html(data: MonitorData) -> str:
    info, st = data.info, data.status
    colour = _STATE_COLOURS.get(st.state.value, "#444")
    reason = f' <span style="color:{colour}">— {html.escape(st.reason)}</span>' if st.reason else ""
    restarts = f" · restarts {st.restarts}" if st.restarts else ""
    stalled = (
        f' <span class="alchemist-stalled" style="color:#d62728">stalled:'
        f" {html.escape(data.stalled)}</span>"
        if data.stalled
        else ""
    )
    gpus = int(info.get("gpus_per_worker") or 0)
    return (
        f'<div class="alchemist-header"><b>{html.escape(str(info.get("name", "")))}</b>'
        f" <code>{html.escape(str(info.get('id', '')))}</code>"
        f' <span class="alchemist-state" data-state="{st.state.value}"'
        f' style="background:{colour};color:white;padding:1px 6px;border-radius:3px">'
        f"{st.state.value}</span>{reason}{stalled}<br>"
        f"elapsed {fmt_duration(data.elapsed())} · workers {info.get('workers', '?')}"
        f" · world size {data.world_size} · GPUs/worker {gpus}"
        f" · algorithm {html.escape(str(info.get('algorithm', '?')))}{restarts}</div>"
    )


def progress_html(data: MonitorData) -> str:
    if not data.progress:
        return "<i>no metrics logged yet</i>"
    rows = []
    total_sps = 0.0
    for rank in sorted(data.progress):
        p = data.progress[rank]
        if p.total_steps:
            # Steps count from 0: at step s, s + 1 steps are done (the last of
            # total_steps steps is 100 %).
            done = min(int(p.total_steps), (p.step or 0) + 1)
            frac = done / p.total_steps
            bar = (
                f'<progress value="{frac:.3f}" max="1"></progress>'
                f" {done}/{int(p.total_steps)} ({100 * frac:.0f}%)"
            )
        else:
            bar = f"{p.step}"
        sps = p.steps_per_second()
        samples = p.samples_per_second()
        total_sps += samples or 0.0
        rows.append(
            f"<tr><td>rank {rank}</td><td>{bar}</td><td>{fmt_num(sps)} steps/s</td>"
            f"<td>{fmt_num(samples) + ' samples/s' if samples else ''}</td></tr>"
        )
    foot = f"<tr><td colspan=4>total {total_sps:.4g} samples/s</td></tr>" if total_sps else ""
    return '<table class="alchemist-progress">' + "".join(rows) + foot + "</table>"


_SYSTEM_COLUMNS: list[tuple[str, str, Callable[[float | None], str]]] = [
    ("cpu_percent", "CPU %", fmt_num),
    ("rss_bytes", "RSS", fmt_bytes),
    ("host_cpu_percent", "host CPU %", fmt_num),
    ("host_mem_percent", "host mem %", fmt_num),
    ("net_sent_rate", "net ↑/s", fmt_bytes),
    ("net_recv_rate", "net ↓/s", fmt_bytes),
    ("gpu_util_percent", "GPU %", fmt_num),
    ("gpu_mem_used_bytes", "GPU mem", fmt_bytes),
]


def system_html(data: MonitorData) -> str:
    if not data.system:
        return "<i>no system metrics yet</i>"
    has_gpu = any("gpu_util_percent" in s["values"] for s in data.system.values())
    cols = [c for c in _SYSTEM_COLUMNS if has_gpu or not c[0].startswith("gpu")]
    head = "<tr><th>rank</th><th>host</th>" + "".join(f"<th>{c[1]}</th>" for c in cols) + "</tr>"
    rows = []
    for rank in sorted(data.system):
        s = data.system[rank]
        cells = "".join(f"<td>{fmt(s['values'].get(key))}</td>" for key, _, fmt in cols)
        rows.append(f"<tr><td>{rank}</td><td>{html.escape(str(s['host']))}</td>{cells}</tr>")
    return '<table class="alchemist-system">' + head + "".join(rows) + "</table>"


def sparkline_svg(series: Series, width: int = 240, height: int = 48) -> str:
    """A small static SVG polyline of a series' display view (for the HTML fallback)."""
    x, y = series.view()
    finite = [(a, b) for a, b in zip(x.tolist(), y.tolist(), strict=True) if math.isfinite(b)]
    if len(finite) < 2:
        return ""
    xs, ys = [a for a, _ in finite], [b for _, b in finite]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    sx = (width - 2) / ((x1 - x0) or 1)
    sy = (height - 2) / ((y1 - y0) or 1)
    pts = " ".join(f"{1 + (a - x0) * sx:.1f},{height - 1 - (b - y0) * sy:.1f}" for a, b in finite)
    return (
        f'<svg width="{width}" height="{height}"><polyline fill="none" stroke="#1f77b4"'
        f' stroke-width="1.5" points="{pts}"/></svg>'
    )


def summary_html(data: MonitorData, log_lines: int = 20) -> str:
    """The whole monitor as static HTML (nbconvert, email, frontends without widgets)."""
    rows = []
    for name in data.metrics:
        s = data.series.get((name, 0)) or next(
            (v for (m, _), v in sorted(data.series.items()) if m == name), None
        )
        if s is None or not len(s):
            continue
        y = s.y
        finite = y[~(y != y)]
        lo = float(finite.min()) if len(finite) else None
        hi = float(finite.max()) if len(finite) else None
        last = s.last
        rows.append(
            f"<tr><td>{html.escape(name)}</td><td>{s.count}</td>"
            f"<td>{fmt_num(last[1] if last else None)}</td><td>{fmt_num(lo)}</td>"
            f"<td>{fmt_num(hi)}</td><td>{sparkline_svg(s)}</td></tr>"
        )
    metrics = (
        '<table class="alchemist-metrics"><tr><th>metric (rank 0)</th><th>points</th>'
        "<th>last</th><th>min</th><th>max</th><th>curve</th></tr>" + "".join(rows) + "</table>"
        if rows
        else ""
    )
    logs = html.escape("\n".join(data.log_tail(None, log_lines)))
    return (
        '<div class="alchemist-monitor">'
        + header_html(data)
        + metrics
        + progress_html(data)
        + system_html(data)
        + f"<pre style='max-height:20em;overflow:auto'>{logs}</pre></div>"
    )


def summary_text(data: MonitorData, log_lines: int = 10) -> str:
    """The monitor as plain text (a terminal, ``repr``)."""
    st = data.status
    info = data.info
    lines = [
        f"job {info.get('id')} ({info.get('name')}): {st.state.value}"
        + (f" — {st.reason}" if st.reason else "")
        + (f", stalled: {data.stalled}" if data.stalled else "")
        + f", elapsed {fmt_duration(data.elapsed())}, world size {data.world_size},"
        f" algorithm {info.get('algorithm', '?')}"
    ]
    for name in data.metrics:
        s = data.series.get((name, 0))
        if s is not None and s.last is not None:
            step, value = s.last
            lines.append(f"  {name}: {fmt_num(value)} at step {int(step)} ({s.count} points)")
    for rank in sorted(data.progress):
        p = data.progress[rank]
        total = f"/{int(p.total_steps)}" if p.total_steps else ""
        lines.append(
            f"  rank {rank}: step {p.step}{total}, {fmt_num(p.steps_per_second())} steps/s"
        )
    lines.extend("  " + line for line in data.log_tail(None, log_lines))
    return "\n".join(lines)


class JobMonitor:
    """The live monitor widget of one job (see the module docstring for entry points).

    Args:
        job: the job (``alchemist.client.Job`` or anything with the :class:`MonitoredJob`
            protocol).
        ranks: ranks whose curves are drawn at first (default rank 0; more on demand).
        interval: seconds between updates (throttle; default 0.15, about 7 per second).
        max_points: points drawn per curve at most (every point stays stored).
        log_lines: lines kept in the log tail.
    """

    def __init__(
        self,
        job: MonitoredJob,
        ranks: Iterable[int] = (0,),
        interval: float = DEFAULT_INTERVAL,
        max_points: int = DEFAULT_MAX_POINTS,
        log_lines: int = DEFAULT_LOG_LINES,
    ) -> None:
        self.job = job
        self.interval = interval
        self.data = MonitorData(job, max_points=max_points, log_lines=log_lines)
        self.ranks = tuple(ranks)
        self.log_lines = log_lines
        self._lock = threading.RLock()
        self._widget: Any = None
        self._figures: dict[str, Any] = {}
        self._marks: dict[str, dict[int, Any]] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.tensorboard_url: str | None = None
        #: the last report the Diagnose button (or :meth:`diagnose`) got
        self.diagnosis: dict[str, Any] | None = None
        #: the last partial report shown while the ranks answered
        self.partial_diagnosis: dict[str, Any] | None = None
        self._diagnose_thread: threading.Thread | None = None
        self.updates = 0
        self.update()

    # -- public API ---------------------------------------------------------------------
    @property
    def status(self) -> JobStatus:
        return self.data.status

    def update(self) -> bool:
        """Read what is new and redraw what changed; return whether anything did."""
        with self._lock:
            changes = self.data.poll()
            if changes and self._widget is not None:
                self._render(changes)
            if changes:
                self.updates += 1
            return bool(changes)

    def display(self, live: bool = True) -> None:
        """Show the monitor in the current cell; with ``live``, keep it updating.

        Updating continues on a background thread until the job ends and everything it
        wrote has been read, or :meth:`stop` is called.
        """
        from IPython.display import display

        display(self)
        if live and not self.data.finished_reading and _in_kernel():
            self._start_thread()

    def follow(self, timeout: float | None = None) -> JobStatus:
        """Update the monitor from this thread until the job ends (or ``timeout`` s).

        Returns:
            The job's status at the end (terminal unless the timeout expired).
        """
        deadline = self._start_following(timeout)
        while not self._followed(deadline):
            time.sleep(self.interval)
        return self.data.status

    async def follow_async(self, timeout: float | None = None) -> JobStatus:
        """:meth:`follow` for an awaiting cell: the kernel handles widget events meanwhile.

        A synchronous :meth:`follow` holds the kernel's event loop until the job ends, so
        the buttons would answer only after the cell. Awaited from a cell (the magics do
        this in a Jupyter kernel), the loop stays free between updates and ipykernel
        dispatches the Cancel and TensorBoard clicks while the cell runs.
        """
        deadline = self._start_following(timeout)
        while not self._followed(deadline):
            await asyncio.sleep(self.interval)
        return self.data.status

    def _start_following(self, timeout: float | None) -> float | None:
        """Stop the background updates (this caller updates now); the deadline."""
        self.stop()
        return None if timeout is None else time.monotonic() + timeout

    def _followed(self, deadline: float | None) -> bool:
        """Update once; whether following is over (all read, or the deadline passed)."""
        self.update()
        if self.data.finished_reading:
            return True
        return deadline is not None and time.monotonic() >= deadline

    def stop(self) -> None:
        """Stop the background updates (the job goes on). Idempotent."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)
        self._thread = None
        self._stop = threading.Event()

    def cancel(self) -> None:
        """Cancel the job (the Cancel button calls this) and show the new state."""
        self.job.cancel()
        with self._lock:
            self.data.poll(force_status=True)
            if self._widget is not None:
                self._render(Changes(status=True, logs=True))

    def open_tensorboard(self) -> str:
        """Start or reuse TensorBoard on this job; return its URL (the link shows it)."""
        from alchemist.tensorboard import open_tensorboard

        handle = open_tensorboard(self.job)
        self.tensorboard_url = handle.url
        if self._widget is not None:
            self._tb_link.value = (
                f'<a href="{html.escape(handle.url)}" target="_blank" rel="noopener">'
                f"TensorBoard ↗</a>"
            )
        return handle.url

    def diagnose(self) -> dict[str, Any]:
        """Diagnose the job (``job.diagnose()``: which rank, and where), show the report
        under the buttons and return it. It waits up to 3 s for the ranks' stacks; while
        they answer, the monitor shows the partial report (``rank 0 answered; waiting for
        rank 1 (up to 3 s)``), also kept in :attr:`partial_diagnosis`."""
        run = getattr(self.job, "diagnose", None)
        if run is None:
            raise TypeError(f"{type(self.job).__name__} has no diagnose(): cannot diagnose it")
        from alchemist import client

        report: dict[str, Any]
        if isinstance(self.job, client.Job):  # partial reports as the ranks answer
            from alchemist.diagnosis.report import diagnose_job

            report = diagnose_job(self.job, on_partial=self._show_partial)
        else:
            report = run()
        self.diagnosis = report
        if self._widget is not None:
            self._diagnosis.value = diagnosis_html(report)
            self._bundle_button.layout.display = None if self._job_dir() else "none"
        return report

    def _show_partial(self, partial: dict[str, Any]) -> None:
        self.partial_diagnosis = partial
        if self._widget is not None:
            self._diagnosis.value = diagnosis_html(partial)

    def _job_dir(self) -> JobDir | None:
        job_dir = getattr(self.job, "job_dir", None)
        return job_dir if isinstance(job_dir, JobDir) else None

    def save_bundle(self, path: str | Path | None = None) -> Path:
        """Write the job's debug bundle (``alchemist-<id>-debug.tar.gz``:
        :mod:`alchemist.diagnosis.bundle`) of the last diagnosis (diagnosing first if
        there is none) into ``path`` (a folder or a file name; default the current
        folder, the notebook's in Jupyter), show a download link to it under the
        diagnosis, and return where it went. The **Save debug bundle** button does this.

        Raises:
            TypeError: the job has no job directory (nothing to pack).
            AlchemistError: the file cannot be written.
        """
        from alchemist.diagnosis.bundle import save_bundle

        job_dir = self._job_dir()
        if job_dir is None:
            raise TypeError(f"{type(self.job).__name__} has no job directory: no debug bundle")
        report = self.diagnosis if self.diagnosis is not None else self.diagnose()
        target = save_bundle(job_dir, report, Path.cwd() if path is None else Path(path))
        if self._widget is not None:
            self._bundle_link.value = bundle_link_html(target, target.read_bytes())
        return target

    def _on_save_bundle(self) -> None:
        try:
            self.save_bundle()
        except Exception as e:  # shown, not raised into the frontend's void
            self._bundle_link.value = (
                f"<span style='color:#d62728'>{html.escape(str(e) or type(e).__name__)}</span>"
            )

    def _on_diagnose(self) -> None:
        """The Diagnose button: :meth:`diagnose` on a thread, like the background
        updates, so the cell's event loop keeps updating the monitor while the ranks
        answer; the button is disabled until the report is shown."""
        if self._diagnose_thread is not None and self._diagnose_thread.is_alive():
            return
        self._diagnose_button.disabled = True
        self._diagnosis.value = "<i>diagnosing…</i>"
        self._bundle_button.layout.display = "none"  # until this diagnosis is shown
        self._bundle_link.value = ""

        def run() -> None:
            try:
                self.diagnose()
            except Exception as e:  # shown, not raised into the frontend's void
                self._diagnosis.value = error_html(str(e) or type(e).__name__)
            finally:
                self._diagnose_button.disabled = self.data.status.state.is_terminal

        self._diagnose_thread = threading.Thread(target=run, name="alchemist-diagnose", daemon=True)
        self._diagnose_thread.start()

    def set_ranks(self, ranks: Iterable[int]) -> None:
        """Draw the curves of these ranks (rank selection in the widget calls this)."""
        with self._lock:
            self.ranks = tuple(sorted(set(ranks)))
            for name, fig in self._figures.items():
                self._reset_traces(name, fig)

    # -- widget -------------------------------------------------------------------------
    @property
    def widget(self) -> Any:
        """The ipywidgets tree (built on first use)."""
        with self._lock:
            if self._widget is None:
                self._build()
            return self._widget

    def _build(self) -> None:
        import bqplot  # imported now, while the job starts, not at the first curve
        import ipywidgets as w

        self._bq = bqplot

        d = self.data
        self._header = w.HTML(header_html(d))
        self._cancel_button = w.Button(
            description="Cancel",
            button_style="danger",
            icon="stop",
            disabled=d.status.state.is_terminal,
        )
        self._cancel_button.on_click(lambda _b: self.cancel())
        self._tb_button = w.Button(description="TensorBoard", icon="line-chart")
        self._tb_link = w.HTML("")

        def on_tb(_b: Any) -> None:
            try:
                self.open_tensorboard()
            except Exception as e:  # shown, not raised into the frontend's void
                self._tb_link.value = f"<span style='color:#d62728'>{html.escape(str(e))}</span>"

        self._tb_button.on_click(on_tb)
        self._diagnose_button = w.Button(
            description="Diagnose",
            icon="stethoscope",
            tooltip="which rank, and where: ask every rank for its stack",
            disabled=d.status.state.is_terminal,
        )
        self._diagnose_button.on_click(lambda _b: self._on_diagnose())
        self._diagnosis = w.HTML("")
        self._bundle_button = w.Button(
            description="Save debug bundle",
            icon="download",
            tooltip="the stacks, flight recorders, log tails and spec of this diagnosis in"
            " one .tar.gz, written into the notebook's folder",
            layout=w.Layout(display="none", width="auto"),
        )
        self._bundle_button.on_click(lambda _b: self._on_save_bundle())
        self._bundle_link = w.HTML("")
        self._rank_select = w.SelectMultiple(
            options=[(f"rank {r}", r) for r in range(d.world_size)],
            value=tuple(r for r in self.ranks if r < d.world_size),
            rows=min(4, max(1, d.world_size)),
            description="curves of",
        )
        self._rank_select.observe(lambda ch: self.set_ranks(ch["new"]), names="value")
        self._charts = w.Box(layout=w.Layout(flex_flow="row wrap"))
        self._charts.add_class("alchemist-charts")
        self._progress = w.HTML(progress_html(d))
        self._system = w.HTML(system_html(d))
        self._log_rank = w.Dropdown(
            options=[("all ranks", -1)] + [(f"rank {r}", r) for r in range(d.world_size)],
            value=-1,
            description="log of",
        )
        self._log_rank.observe(lambda _ch: self._render_logs(), names="value")
        self._log = w.HTML()
        self._log.add_class("alchemist-log")
        controls = w.HBox(
            [self._cancel_button, self._tb_button, self._diagnose_button, self._tb_link]
        )
        self._widget = w.VBox(
            [
                self._header,
                controls,
                self._diagnosis,
                w.HBox([self._bundle_button, self._bundle_link]),
                self._rank_select,
                self._charts,
                w.HTML("<b>progress</b>"),
                self._progress,
                w.HTML("<b>system</b>"),
                self._system,
                self._log_rank,
                self._log,
            ]
        )
        self._widget.add_class("alchemist-monitor")
        for name in d.metrics:
            self._add_chart(name)
        self._render_logs()

    def _add_chart(self, name: str) -> None:
        import ipywidgets as w

        bq = self._bq
        # Steps are whole numbers from 0: a scale from 0 to at least MIN_STEP_AXIS keeps
        # the ticks on integers (an automatic domain around one point gave "-20.1149m").
        xs, ys = bq.LinearScale(min=0.0, max=float(MIN_STEP_AXIS)), bq.LinearScale()
        fig = bq.Figure(
            title=name,
            axes=[
                # explicit tick formats: bqplot's automatic one throws in the front end
                # on a single-point axis, and a widget whose update failed there never
                # updates again (the chart froze at its first point)
                bq.Axis(scale=xs, label="step", tick_format="~s", num_ticks=5),  # 1.5k, 20M
                bq.Axis(scale=ys, orientation="vertical", tick_format=".3g", num_ticks=5),
            ],
            fig_margin={"top": 40, "bottom": 40, "left": 60, "right": 10},
            layout=w.Layout(width="420px", height="260px"),
            animation_duration=0,
        )
        fig.add_class("alchemist-chart")
        fig.add_class(f"alchemist-chart-{_css_name(name)}")
        fig._alchemist_scales = (xs, ys)
        self._figures[name] = fig
        self._reset_traces(name, fig)
        self._charts.children = (*self._charts.children, fig)

    def _reset_traces(self, name: str, fig: Any) -> None:
        """One line mark per shown rank (rank selection rebuilds them; points do not)."""
        bq = self._bq
        xs, ys = fig._alchemist_scales
        marks = {}
        for rank in self.ranks:
            s = self.data.series.get((name, rank))
            x, y = s.view() if s is not None else ([], [])
            marks[rank] = bq.Lines(
                x=x,
                y=y,
                scales={"x": xs, "y": ys},
                colors=[_RANK_COLOURS[rank % len(_RANK_COLOURS)]],
                labels=[f"rank {rank}"],
                display_legend=len(self.ranks) > 1,
            )
        self._marks[name] = marks
        fig.marks = list(marks.values())

    def _render(self, changes: Changes) -> None:
        d = self.data
        if changes.status or d.status.state.value == "running":
            self._header.value = header_html(d)  # elapsed time moves while running
        self._cancel_button.disabled = d.status.state.is_terminal
        diagnosing = self._diagnose_thread is not None and self._diagnose_thread.is_alive()
        self._diagnose_button.disabled = d.status.state.is_terminal or diagnosing
        for name in changes.new_metrics:
            if name not in self._figures:
                self._add_chart(name)
        touched: dict[str, set[int]] = collections.defaultdict(set)
        for name, rank in changes.series:
            touched[name].add(rank)
        for name, ranks in touched.items():
            fig = self._figures.get(name)
            if fig is None or name in changes.new_metrics:
                continue
            for rank, mark in self._marks.get(name, {}).items():
                if rank in ranks:
                    x, y = d.series[(name, rank)].view()
                    with mark.hold_sync():  # one message per curve and update
                        mark.x, mark.y = x, y
            self._fit_step_axis(name, fig)
        if changes.progress:
            self._progress.value = progress_html(d)
        if changes.system:
            self._system.value = system_html(d)
        if changes.logs:
            self._render_logs()

    def _fit_step_axis(self, name: str, fig: Any) -> None:
        """Fix the step axis to [0, MIN_STEP_AXIS] until the steps outgrow it, then let
        it follow the data (whole-number ticks either way)."""
        last = max(
            (s.x.max() for (n, _r), s in self.data.series.items() if n == name and len(s)),
            default=0.0,
        )
        xs = fig._alchemist_scales[0]
        want = float(MIN_STEP_AXIS) if last < MIN_STEP_AXIS else None
        if xs.max != want:
            xs.max = want

    def _render_logs(self) -> None:
        rank = self._log_rank.value
        lines = self.data.log_tail(None if rank == -1 else rank)
        self._log.value = (
            "<pre style='max-height:16em;overflow:auto;font-size:11px;margin:0'>"
            + html.escape("\n".join(lines))
            + "</pre>"
        )

    # -- background updates -------------------------------------------------------------
    def _start_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        stop = self._stop

        def run() -> None:
            while not stop.wait(self.interval):
                try:
                    self.update()
                except Exception:  # a vanished job directory must not kill the kernel
                    return
                if self.data.finished_reading:
                    return

        self._thread = threading.Thread(target=run, name="alchemist-monitor", daemon=True)
        self._thread.start()

    # -- representations ----------------------------------------------------------------
    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {}
        try:
            widget_bundle = self.widget._repr_mimebundle_()
            if widget_bundle:
                bundle.update(widget_bundle)
        except Exception:  # no ipywidgets or bqplot: the static views still work
            pass
        bundle["text/plain"] = repr(self)
        bundle["text/html"] = self._repr_html_()
        return bundle

    def _repr_html_(self) -> str:
        with self._lock:
            return summary_html(self.data)

    def __repr__(self) -> str:
        with self._lock:
            return summary_text(self.data)


_RANK_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]


def _css_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:  # pragma: no cover
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None
