"""A real JupyterLab in headless Chromium for the monitor's browser tests: the notebook
it opens, the Chromium arguments, and the helpers that drive a page (the ``lab`` and
``browser`` fixtures are in ``tests/metrics/conftest.py``)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def lab_home(url: str) -> Path:
    """The ``ALCHEMIST_HOME`` of the JupyterLab that the ``lab`` fixture started at
    ``url``: where the jobs and sessions of its kernels live (to stop what a failed
    test left running)."""
    import urllib.parse

    import psutil

    port = urllib.parse.urlsplit(url).port
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = proc.info["cmdline"] or []
            if "jupyterlab" in cmd and f"--port={port}" in cmd:
                return Path(proc.environ()["ALCHEMIST_HOME"])
        except (psutil.Error, KeyError):
            continue
    raise LookupError(f"no JupyterLab of the lab fixture serves {url}")
