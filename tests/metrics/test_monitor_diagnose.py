"""The monitor's stall note and Diagnose button, on a real hung job.

Real parts: a 2-rank job through ``alchemist.client.submit`` on the local backend
(supervisor, torchrun, gloo), whose rank 1 sleeps in ``load_batch`` before the
``all_reduce`` rank 0 waits in (the diagnosis tests' ``MISSING`` cell); the monitor is
displayed from a real IPython shell, its Diagnose button is pressed through its click
handler, and the diagnosis signals the real rank processes. The only thing changed for
speed is the stall threshold's 30 s floor (1 s, set on the module in this process).
The last test runs a real JupyterLab in headless Chromium (``tests/metrics/conftest.py``).
The writer-process job of one test is the metrics tests' stand-in for a job
(``tests/metrics/conftest.py``): it has no ``diagnose()``.
Waits poll for a condition with a deadline; every job is cancelled at the end.
"""

from __future__ import annotations

import base64
import io
import json
import re
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from IPython.utils.capture import capture_output

from alchemist import client
from alchemist.diagnosis import progress
from alchemist.job.spec import JobState
from alchemist.widgets.diagnosis import diagnosis_html
from tests.support.diagnose import MISSING, line_of, logged, silent_job, wait_for
from tests.support.lab import OUTPUT, POINTS_JS, open_and_run, wait_for_monitor

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def press_diagnose(m: Any, kind: str, timeout: float = 20.0) -> dict[str, Any]:
    """Press Diagnose until the report is ``kind`` (rank 0 may still be on its way to
    the all_reduce); each press runs on the monitor's thread, waited for here."""
    seen: list[str] = []

    def attempt() -> dict[str, Any] | None:
        m._diagnose_button.click()
        thread = m._diagnose_thread
        assert thread is not None, "the button started no diagnosis"
        thread.join(15)
        assert not thread.is_alive(), "the diagnosis did not end within 15 s"
        seen.append(m._diagnosis.value)
        report: dict[str, Any] | None = m.diagnosis
        return report if report is not None and report["classification"] == kind else None

    try:
        return wait_for(attempt, timeout, kind)
    except AssertionError:
        raise AssertionError(f"no {kind}; last shown: {seen[-1:]}")


def test_diagnose_button_and_stall_note_name_the_missing_rank_and_its_frame(
    ip: Any,
    submit: Callable[..., client.Job],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = submit(MISSING)
    wait_for(
        lambda: logged(job, 0, "rank 0 ready") and logged(job, 1, "rank 1 ready"), 120, "ready"
    )
    ip.user_ns["job"] = job
    with capture_output() as cap:
        result = ip.run_cell(
            "from alchemist.widgets import JobMonitor\n"
            "m = JobMonitor(job, interval=0.1)\n"
            "m.display(live=False)"
        )
    result.raise_error()
    m = ip.user_ns["m"]
    assert WIDGET_MIME in cap.outputs[0].data
    assert not m._diagnose_button.disabled
    assert m._diagnosis.value == ""

    report = press_diagnose(m, "missing_rank")
    sleep_line, reduce_line = line_of(MISSING, "time.sleep(600)"), line_of(MISSING, "all_reduce")
    shown = m._diagnosis.value
    # The headline names rank 1 and its frame, and rank 0's collective.
    assert report["headline"].startswith("rank 1 has not reached all_reduce")
    assert (
        f"<b>rank 1 has not reached all_reduce; it is in `load_batch` (cell line {sleep_line});"
        f" rank 0 waits in all_reduce from the cell (line {reduce_line})</b>"
    ) in shown
    # One line per rank: liveness, last step, where, and the text of the line.
    rank0 = shown.split('data-rank="0">')[1].split("</li>")[0]
    rank1 = shown.split('data-rank="1">')[1].split("</li>")[0]
    assert "rank 0  running  step 9 (" in rank0 and "in all_reduce from the cell" in rank0
    assert "rank 1  running  step 4 (" in rank1
    assert f"in `load_batch` (cell line {sleep_line})" in rank1
    assert "<code>time.sleep(600)</code>" in rank1
    # The grouped stacks, collapsed: one group per rank here (different stacks).
    assert shown.count('<details class="alchemist-diagnosis-group">') == 2
    assert f"load_batch (&lt;cell&gt;:{sleep_line})" in shown
    assert not m._diagnose_button.disabled, "the button is usable again after the report"
    assert job.status().state == JobState.RUNNING, "diagnosing never changes the job"

    # The stall note in the state line, from the monitor's own status poll.
    assert m.data.stalled is None or "rank 1 at step 4" in m.data.stalled
    monkeypatch.setattr(progress, "MIN_STALL_S", 1.0)

    def stalled_shown() -> bool:
        m.update()
        return "alchemist-stalled" in m._header.value

    wait_for(stalled_shown, 15, "the stall note in the header")
    assert "stalled: no rank advanced for" in m._header.value
    assert "rank 1 at step 4" in m._header.value and "rank 0 at 9" in m._header.value
    assert "stalled: no rank advanced" in repr(m)

    job.cancel()
    wait_for(lambda: (m.update(), m.status.state.is_terminal)[1], 30, "the cancelled state")
    m.update()
    assert m.data.stalled is None and "alchemist-stalled" not in m._header.value
    assert m._diagnose_button.disabled, "a job that ended has nothing to diagnose"


def test_diagnose_shows_who_answered_while_waiting_then_saves_the_bundle(
    ip: Any,
    submit: Callable[..., client.Job],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rank 1 answers nothing (its code holds the GIL, the stack signal ignored): while
    the Diagnose thread waits its 3 s for rank 1 the monitor shows who answered and who
    is awaited; then the report says rank 1 did not answer, and Save debug bundle writes
    the bundle into the current folder (the notebook's) and links to it."""
    job = silent_job(submit)
    ip.user_ns["job"] = job
    with capture_output():
        ip.run_cell(
            "from alchemist.widgets import JobMonitor\n"
            "m = JobMonitor(job, interval=0.1)\n"
            "m.display(live=False)"
        ).raise_error()
    m = ip.user_ns["m"]
    assert m._bundle_button.layout.display == "none", "no bundle before a diagnosis"
    m._diagnose_button.click()
    thread = m._diagnose_thread
    assert thread is not None
    waiting = "rank 0 answered; waiting for rank 1 (up to 3 s)"
    shown = wait_for(lambda: waiting in m._diagnosis.value and m._diagnosis.value, 10, waiting)
    assert thread.is_alive(), "the partial report is shown while the ranks are asked"
    assert 'class="alchemist-diagnosis-collecting"' in shown
    assert 'data-rank="0"' in shown and 'data-rank="1"' not in shown  # who answered
    thread.join(15)
    assert not thread.is_alive()
    final = m._diagnosis.value
    assert waiting not in final and m.diagnosis is not None
    assert "rank 1 did not answer with stacks within 3 s" in final
    assert f"<code>alchemist diagnose {job.id} --bundle PATH</code>" in final
    assert f"<code>%alchemist_diagnose {job.id} --bundle PATH</code>" in final
    assert m.partial_diagnosis is not None and m.partial_diagnosis["waiting_for"] == [1]

    # Save debug bundle: into the current folder, with a link that carries the file.
    monkeypatch.chdir(tmp_path)
    assert m._bundle_button.layout.display != "none"
    m._bundle_button.click()
    name = f"alchemist-{job.id}-debug.tar.gz"
    saved = tmp_path / name
    link = m._bundle_link.value
    assert saved.is_file(), link
    assert f'download="{name}"' in link and str(saved) in link
    data = base64.b64decode(link.split("data:application/gzip;base64,")[1].split('"')[0])
    assert data == saved.read_bytes()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.extractfile(f"alchemist-{job.id}-debug/report.json")
        assert member is not None
        assert json.loads(member.read())["headline"] == m.diagnosis["headline"]


def test_diagnose_of_a_job_without_diagnosis_says_so_in_one_line(writer_job: Any) -> None:
    """The writer stand-in has no ``diagnose()``: the button shows one clear line."""
    from alchemist.widgets import JobMonitor

    job = writer_job(n=2000, pause=0.02)
    m = JobMonitor(job, interval=0.1)
    m.widget  # noqa: B018 - builds the widget with its buttons
    m._diagnose_button.click()
    assert m._diagnose_thread is not None
    m._diagnose_thread.join(10)
    assert m._diagnosis.value.count("\n") == 0
    assert "diagnosis failed: WriterProcessJob has no diagnose(): cannot diagnose it" in (
        m._diagnosis.value
    )
    assert m.diagnosis is None and m.data.stalled is None
    assert not m._diagnose_button.disabled  # still running: it may be pressed again
    job.cancel()


def test_diagnosis_html_escapes_what_the_ranks_report() -> None:
    """A cell line or a frame name is the user's text: shown, never interpreted."""
    report = {
        "classification": "user_deadlock",
        "headline": "rank 0 in `f` (cell line 2) <b>",
        "ranks": [{"rank": 0, "line": "rank 0  running  in <f>", "code": "x = '<script>'"}],
        "groups": [
            {
                "ranks": [0],
                "summary": "<f>",
                "frames": [{"file": "<cell>", "line": 2, "function": "<f>"}],
            }
        ],
        "notes": ["the job logged no steps"],
        "partial": True,
    }
    shown = diagnosis_html(report)
    assert "<script>" not in shown and "&lt;script&gt;" in shown
    assert "rank 0 in `f` (cell line 2) &lt;b&gt;" in shown
    assert "&lt;f&gt; (&lt;cell&gt;:2)" in shown and "rank 0: &lt;f&gt;" in shown
    assert "note: the job logged no steps" in shown and "partial:" in shown
    assert 'data-classification="user_deadlock"' in shown


@pytest.mark.browser
def test_diagnose_button_in_jupyterlab_shows_the_headline(
    lab: str,
    browser: Any,
) -> None:
    """Real JupyterLab and Chromium (the monitor browser test's ``lab`` and ``browser``):
    the cell of ``cancel.ipynb`` runs a real 2-rank job that logs a step every 0.1 s;
    Diagnose, pressed while the cell runs, shows a headline (a job that advances: any
    class) and a line per rank, sent from the diagnosis thread to the front end."""
    page = open_and_run(browser, lab, "cancel.ipynb")
    monitor = wait_for_monitor(page, "diagnose")
    page.wait_for_function(f"() => ({POINTS_JS})() >= 3", timeout=120_000)
    cell = page.locator(".jp-Notebook .jp-Cell").nth(1)
    assert cell.locator(".jp-InputPrompt", has_text="[*]").count() == 1, "the cell is running"
    monitor.get_by_role("button", name="Diagnose").click()
    headline = monitor.locator(".alchemist-diagnosis-headline b")
    headline.wait_for(timeout=60_000)
    assert headline.inner_text().strip()
    ranks = monitor.locator(".alchemist-diagnosis-rank")
    ranks.nth(1).wait_for()
    assert [t.split()[:2] for t in ranks.all_inner_texts()] == [["rank", "0"], ["rank", "1"]]
    # Save debug bundle: written into the notebook's folder; its link downloads it.
    monitor.get_by_role("button", name="Save debug bundle").click()
    link = monitor.locator(".alchemist-bundle a[download]")
    link.wait_for(timeout=30_000)
    name = link.get_attribute("download") or ""
    assert re.fullmatch(r"alchemist-\w+-debug\.tar\.gz", name), name
    with page.expect_download() as info:
        link.click()
    saved = Path(info.value.path())
    assert saved.read_bytes()[:2] == b"\x1f\x8b", "not a gzip file"
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / "monitor-diagnosed.png"), full_page=True)
    monitor.get_by_role("button", name="Cancel").click()
    cell.locator(".jp-InputPrompt", has_text="[2]").wait_for(timeout=60_000)
    page.context.close()
