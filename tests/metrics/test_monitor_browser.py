"""The job monitor in a real JupyterLab, rendered in headless Chromium (Playwright).

A real ``jupyter lab`` runs a notebook whose cell is ``%%alchemist_distributed -n 2``
(two real torchrun workers on the local backend); the test watches the bqplot chart
of the loss gain points while the job logs, the state end as succeeded, and keeps a
screenshot in ``test-output/``. A second test presses the monitor's Cancel button while
its cell still runs, and sees the job and then the cell end. Needs Chromium at /usr/bin/chromium
(``scripts/setup.d/20-browser.sh``); skips itself naming that fix when it is missing.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import processes_under

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
OUTPUT = REPO / "test-output"
CHROMIUM = Path("/usr/bin/chromium")
TOKEN = "alchemist-monitor-test"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]  # fmt: skip

CURVES_CELL = """%%alchemist_distributed -n 2 --name browser-curves
import time
import alchemist
alchemist.log(0, total_steps=50)
alchemist.log(0, loss=1.0)
time.sleep(1.5)  # the chart first shows a single point (a zero-width step axis)
for step in range(1, 50):
    alchemist.log(step, loss=1.0 / (step + 1))
    time.sleep(0.12)
"""

# A long cell: the user presses the monitor's Cancel button while the cell still runs.
LONG_CELL = """%%alchemist_distributed -n 2 --name browser-cancel
import time, alchemist
for step in range(100000):
    alchemist.log(step, loss=1.0 / (step + 1))
    time.sleep(0.1)
"""


def notebook(cell: str) -> dict[str, Any]:
    def code(src: str) -> dict[str, Any]:
        return {"cell_type": "code", "metadata": {}, "execution_count": None,
                "outputs": [], "source": src}  # fmt: skip

    return {
        "cells": [code("%load_ext alchemist"), code(cell)],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real JupyterLab with its own home, config and settings; yields its URL."""
    if not CHROMIUM.exists():
        pytest.skip("Chromium missing: run scripts/setup.d/20-browser.sh")
    tmp = tmp_path_factory.mktemp("monitor-lab")
    root, home, config, settings = (tmp / d for d in ("root", "home", "config", "settings"))
    for d in (root, home, config, settings):
        d.mkdir()
    (root / "curves.ipynb").write_text(json.dumps(notebook(CURVES_CELL)))
    (root / "cancel.ipynb").write_text(json.dumps(notebook(LONG_CELL)))
    news = settings / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
    port = _free_port()
    env = {
        **os.environ,
        "ALCHEMIST_HOME": str(home),
        "JUPYTER_CONFIG_DIR": str(config),
        "OMP_NUM_THREADS": "1",
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    env.pop("JUPYTERHUB_USER", None)
    with open(tmp / "lab.log", "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
                f"--port={port}", "--ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}",
                f"--ServerApp.root_dir={root}", f"--LabApp.user_settings_dir={settings}",
                f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
            ],
            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}api/status?token={TOKEN}", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        f"JupyterLab did not start: {(tmp / 'lab.log').read_text()[-3000:]}"
                    )
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        left = processes_under(home)
        for p in left:
            p.kill()
        assert not left, f"jobs left running: {[p.cmdline() for p in left]}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


def open_and_run(browser: Any, url: str, name: str) -> Any:
    """Open ``name`` in JupyterLab, wait for an idle kernel, and run all cells."""
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.alchemist_errors = errors  # widget errors the front end logged (see below)
    page.set_default_timeout(60_000)
    page.goto(f"{url}lab/tree/{name}?reset&token={TOKEN}")
    try:
        page.locator(".jp-Notebook .jp-Cell").first.wait_for()
        page.locator("#jp-main-statusbar", has_text="Idle").wait_for(timeout=90_000)
        page.locator(".lm-MenuBar-item", has_text="Run").first.click()
        page.locator(".lm-Menu-item[data-command='runmenu:run-all']").click()
        # The first cell ran once its prompt shows an execution count.
        first = page.locator(".jp-Notebook .jp-Cell").first
        first.locator(".jp-InputPrompt", has_text="[1]").wait_for(timeout=90_000)
    except Exception:
        OUTPUT.mkdir(exist_ok=True)
        page.screenshot(path=str(OUTPUT / f"monitor-{name}-not-run.png"), full_page=True)
        raise
    return page


def wait_for_monitor(page: Any, label: str) -> Any:
    """The monitor widget once rendered; on failure a screenshot and the cell outputs."""
    monitor = page.locator(".alchemist-monitor")
    try:
        monitor.wait_for(timeout=120_000)
    except Exception:
        OUTPUT.mkdir(exist_ok=True)
        page.screenshot(path=str(OUTPUT / f"monitor-{label}-missing.png"), full_page=True)
        outputs = page.locator(".jp-OutputArea").all_inner_texts()
        pytest.fail(f"no monitor rendered; cell outputs: {outputs}")
    return monitor


POINTS_JS = """() => {
    // vertices drawn by the first curve of the loss chart (bqplot: an SVG path M..L..L)
    const path = document.querySelector('.alchemist-monitor .alchemist-chart-loss path.line');
    if (!path) return -1;
    const d = path.getAttribute('d') || '';
    return d ? (d.match(/L/g) || []).length + 1 : 0;
}"""


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
