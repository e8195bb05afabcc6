"""The job monitor widget in a real IPython shell, on real jobs and a real writer process."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from IPython.utils.capture import capture_output

from alchemist.job.spec import JobState
from alchemist.metrics.downsample import Series, minmax_downsample

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def test_downsample_keeps_first_last_extremes_and_nan() -> None:
    rng = np.random.default_rng(0)
    n = 100_000
    x = np.arange(n, dtype=float)
    y = np.cumsum(rng.normal(size=n))
    y[31_337] = 1e6  # a spike the eye must see
    y[77_000] = -1e6
    y[50_001] = np.nan  # a NaN loss is news too
    dx, dy = minmax_downsample(x, y, 1000)
    assert len(dx) <= 1010
    assert dx[0] == 0 and dx[-1] == n - 1
    assert 31_337 in dx and 77_000 in dx and 50_001 in dx
    assert np.all(np.diff(dx) > 0)  # original order, no duplicates
    assert np.array_equal(dy[~np.isnan(dy)], y[dx.astype(int)][~np.isnan(dy)])
    short_x, _ = minmax_downsample(x[:50], y[:50], 1000)
    assert len(short_x) == 50  # short series untouched


def test_series_stores_everything_and_views_a_bounded_subset() -> None:
    s = Series(max_points=100)
    for i in range(10_000):
        s.append(i, float(i % 97))
    assert len(s) == 10_000 and s.x[-1] == 9999 and s.last == (9999.0, float(9999 % 97))
    vx, _ = s.view()
    assert len(vx) <= 110 and vx[0] == 0 and vx[-1] == 9999
    assert s.view() is s.view()  # cached until new points arrive
    s.append(10_000, 1.0)
    assert s.view()[0][-1] == 10_000


def test_monitor_rebuilds_a_finished_jobs_history(ip: Any, finished_job: Any) -> None:
    """Attaching to a finished real job shows its whole history: curves, progress, logs."""
    ip.user_ns["job"] = finished_job
    with capture_output() as cap:
        result = ip.run_cell(
            "from alchemist.widgets import JobMonitor\nm = JobMonitor(job)\nm.display()"
        )
    result.raise_error()
    m = ip.user_ns["m"]
    bundle = cap.outputs[0].data
    assert WIDGET_MIME in bundle, "a widget frontend gets the live widget"
    assert "succeeded" in bundle["text/html"] and "loss" in bundle["text/html"]
    assert "succeeded" in bundle["text/plain"]

    events = finished_job.metrics()
    for rank in (0, 1):
        steps = [e["step"] for e in events if e["rank"] == rank and "loss" in e["values"]]
        losses = [
            e["values"]["loss"] for e in events if e["rank"] == rank and "loss" in e["values"]
        ]
        assert steps == list(range(40))
        assert m.data.points("loss", rank) == 40
        assert m.data.series[("loss", rank)].y.tolist() == losses

    # One chart per metric, rank 0 by default, the points equal the events.
    figs = m._figures
    assert set(figs) == {"loss", "acc"}
    (line,) = figs["loss"].marks
    assert list(line.x) == list(range(40))
    assert list(line.y) == pytest.approx([1.0 / (s + 1) for s in range(40)])
    # Other ranks on demand (the rank selector calls set_ranks).
    m._rank_select.value = (0, 1)
    assert [mk.labels for mk in figs["loss"].marks] == [["rank 0"], ["rank 1"]]
    assert list(figs["loss"].marks[1].y) == pytest.approx([1.0 / (s + 1) + 1 for s in range(40)])

    # Header, progress with total_steps and throughput, system metrics, log tail.
    assert 'data-state="succeeded"' in m._header.value
    assert "workers 2" in m._header.value and "algorithm sync" in m._header.value
    assert m.data.progress[0].total_steps == 40 and m.data.progress[1].step == 39
    assert "40/40 (100%)" in m._progress.value and "samples/s" in m._progress.value
    assert set(m.data.system) == {0, 1}, "each rank's sampler wrote system metrics"
    assert m.data.system[0]["values"]["rss_bytes"] > 0
    assert "CPU %" in m._system.value
    assert "rank 0 finished training" in m._log.value
    m._log_rank.value = 1
    assert "rank 1 finished training" in m._log.value
    assert "rank 0 finished training" not in m._log.value
    assert m._cancel_button.disabled

    # The fallback where widgets cannot render: a readable HTML and text summary.
    page = m._repr_html_()
    assert "<svg" in page and "acc" in page and "rank 1 finished training" in page
    assert "loss: 0.025 at step 39 (40 points)" in repr(m)
    assert m.follow(timeout=10).state == JobState.SUCCEEDED


def test_monitor_gains_points_while_a_job_logs(ip: Any, writer_job: Any) -> None:
    """A live writer process: the chart grows in throttled batches; display is bounded."""
    from alchemist.widgets import JobMonitor

    job = writer_job(n=150, pause=0.02)
    m = JobMonitor(job, interval=0.1, max_points=60)
    with capture_output() as cap:
        m.display(live=False)
    assert WIDGET_MIME in cap.outputs[0].data
    seen: list[int] = []
    fig = None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        m.update()
        if "loss" in m._figures:
            fig = fig or m._figures["loss"]
            assert m._figures["loss"] is fig, "the chart is updated, never rebuilt"
            seen.append(m.data.points("loss"))
            assert len(fig.marks[0].x) <= 62  # downsampled for display
        if m.status.state.is_terminal and m.data.finished_reading:
            break
        time.sleep(0.25)
    assert m.status.state == JobState.SUCCEEDED
    assert seen == sorted(seen)
    growing = sorted(set(seen))
    assert len(growing) >= 3 and growing[0] < 150, f"saw no growth while running: {growing}"
    assert m.data.points("loss") == 150, "every point is kept"
    x = list(fig.marks[0].x)
    assert x[0] == 0 and x[-1] == 149
    step_scale = fig.axes[0].scale  # from 0, following the data once past 10 steps
    assert step_scale.min == 0 and step_scale.max is None
    assert m.updates < 150 / 2, "updates are batched, not one per point"
    assert "writer done" in m._log.value
    assert "150/150" in m._progress.value


def test_display_keeps_updating_in_the_background(
    writer_job: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a kernel, display() returns at once and a thread keeps the widget current."""
    from alchemist.widgets import monitor as monitor_mod

    monkeypatch.setattr(monitor_mod, "_in_kernel", lambda: True)
    job = writer_job(n=60, pause=0.02)
    m = monitor_mod.JobMonitor(job, interval=0.1)
    with capture_output():
        m.display()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (m.data.finished_reading):
            time.sleep(0.1)
        assert m.data.points("loss") == 60
        assert m.status.state == JobState.SUCCEEDED
        assert m._thread is not None
        m._thread.join(5)
        assert not m._thread.is_alive(), "the updater ends with the job"
    finally:
        m.stop()


def test_cancel_button_stops_a_real_job(writer_job: Any) -> None:
    """The Cancel button of a running job's monitor stops it (real local job, torchrun)."""
    from alchemist import client
    from alchemist.widgets import JobMonitor

    code = (
        "import time, alchemist\n"
        "for i in range(100000):\n"
        "    alchemist.log(i, loss=1.0 / (i + 1))\n"
        "    time.sleep(0.05)\n"
    )
    job = client.submit(code, workers=2, name="to-cancel")
    try:
        m = JobMonitor(job, interval=0.1)
        m.widget  # noqa: B018 - builds the widget with its buttons
        deadline = time.monotonic() + 180
        while m.data.points("loss") < 3 and time.monotonic() < deadline:
            m.update()
            time.sleep(0.2)
        assert m.data.points("loss") >= 3, job.logs()
        assert not m._cancel_button.disabled
        m._cancel_button.click()
        while not m.status.state.is_terminal and time.monotonic() < deadline:
            m.update()
            time.sleep(0.2)
        assert m.status.state == JobState.CANCELLED
        assert job.status().state == JobState.CANCELLED
        assert m._cancel_button.disabled
        assert 'data-state="cancelled"' in m._header.value
    finally:
        job.cancel()
