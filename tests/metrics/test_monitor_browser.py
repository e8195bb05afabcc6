"""The job monitor in a real JupyterLab, rendered in headless Chromium (Playwright).

A real ``jupyter lab`` runs a notebook whose cell is ``%%alchemist_distributed -n 2``
(two real torchrun workers on the local backend); the test watches the bqplot chart
of the loss gain points while the job logs, the state end as succeeded, and keeps a
screenshot in ``test-output/``. A second test presses the monitor's Cancel button while
its cell still runs, and sees the job and then the cell end. Needs Chromium at /usr/bin/chromium
(``scripts/setup.d/20-browser.sh``); skips itself naming that fix when it is missing.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.support.lab import OUTPUT, POINTS_JS, open_and_run, wait_for_monitor

pytestmark = pytest.mark.browser


def test_monitor_chart_grows_while_the_job_logs(lab: str, browser: Any) -> None:
    page = open_and_run(browser, lab, "curves.ipynb")
    monitor = wait_for_monitor(page, "curves")
    state = monitor.locator(".alchemist-state")
    counts: list[int] = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        counts.append(page.evaluate(POINTS_JS))
        if state.count() and state.get_attribute("data-state") == "succeeded":
            break
        page.wait_for_timeout(250)
    else:
        page.screenshot(path=str(OUTPUT / "monitor-timeout.png"))
        pytest.fail(f"the job did not succeed in time; points seen: {counts[-10:]}")
    page.wait_for_function(f"() => ({POINTS_JS})() === 50", timeout=30_000)
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / "monitor-succeeded.png"), full_page=True)
    drawn = sorted({c for c in counts if c > 0})
    assert len(drawn) >= 3 and drawn[0] < 50, f"the chart did not grow while running: {drawn}"
    shown = [c for c in counts if c >= 0]
    assert shown == sorted(shown), f"points never disappear: {shown}"
    # A widget whose update fails in the front end stops updating for good (bqplot's
    # automatic tick format threw on the single-point axis): none may fail.
    assert not [e for e in page.alchemist_errors if "setting state" in e], page.alchemist_errors
    # The rest of the monitor rendered too.
    assert "50/50" in monitor.locator(".alchemist-progress").inner_text()
    assert monitor.get_by_role("button", name="Cancel").is_disabled()
    page.context.close()


def test_cancel_button_stops_the_job(lab: str, browser: Any) -> None:
    page = open_and_run(browser, lab, "cancel.ipynb")
    monitor = wait_for_monitor(page, "cancel")
    try:
        page.wait_for_function(f"() => ({POINTS_JS})() >= 3", timeout=120_000)
    except Exception:
        OUTPUT.mkdir(exist_ok=True)
        page.screenshot(path=str(OUTPUT / "monitor-cancel-no-points.png"), full_page=True)
        outputs = page.locator(".jp-OutputArea").all_inner_texts()
        pytest.fail(
            f"the chart never showed 3 points; points: {page.evaluate(POINTS_JS)}; outputs: {outputs}"
        )
    cell = page.locator(".jp-Notebook .jp-Cell").nth(1)
    assert cell.locator(".jp-InputPrompt", has_text="[*]").count() == 1, "the cell is running"
    monitor.get_by_role("button", name="Cancel").click()
    monitor.locator(".alchemist-state[data-state='cancelled']").wait_for(timeout=60_000)
    # the click was handled while the cell ran, and the cell ends with its job
    cell.locator(".jp-InputPrompt", has_text="[2]").wait_for(timeout=60_000)
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / "monitor-cancelled.png"), full_page=True)
    assert monitor.get_by_role("button", name="Cancel").is_disabled()
    page.context.close()
