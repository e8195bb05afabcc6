"""A ``%%alchemist_px`` cell's output in a real JupyterLab, driven in headless Chromium.

The notebook starts a real session of two ranks (local ipyparallel engines) and runs a
cell that prints three lines on each rank, waits for the test's go-ahead, and prints
three more. The test sees the first lines in the rank-output widget while the cell still
runs, then every line of both ranks, each rank's in order; clicking "rank 1" shows only
rank 1's lines and "all ranks" both again, answered by the idle kernel after the cell
(and after ``%alchemist_session stop``). The JupyterLab is the monitor's (the ``lab``
and ``browser`` fixtures of ``tests/metrics/conftest.py``); a finalizer stops every
session the notebook left running, so the ``lab`` fixture's leak check holds even when
the test fails. Needs Chromium at /usr/bin/chromium (skips itself naming the fix).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.metrics.conftest import browser, lab  # noqa: F401 - the fixtures, reused
from tests.support.lab import OUTPUT, TOKEN, lab_home, notebook, open_and_run

pytestmark = pytest.mark.browser

NAME = "session-output.ipynb"
RELEASE = "release-second-half"
LINES = 6

START = "%alchemist_session start -n 2 --name browser-output"
PX = f"""%%alchemist_px
import os, time
import alchemist
rank = alchemist.context().rank
for i in range(3):
    print(f"line {{i}} from rank {{rank}}", flush=True)
deadline = time.monotonic() + 180  # the test's go-ahead: a file in the notebook's folder
while not os.path.exists("{RELEASE}") and time.monotonic() < deadline:
    time.sleep(0.05)
for i in range(3, {LINES}):
    print(f"line {{i}} from rank {{rank}}", flush=True)
"""
STOP = "%alchemist_session stop"


def expected(rank: int, upto: int = LINES) -> list[str]:
    return [f"[rank {rank}] line {i} from rank {rank}" for i in range(upto)]


def put(url: str, path: str, model: dict[str, Any]) -> None:
    """Write a file into the lab's root through Jupyter's contents API."""
    request = urllib.request.Request(
        f"{url}api/contents/{path}",
        method="PUT",
        data=json.dumps(model).encode(),
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30):
        pass


def alchemist_cli(home: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ALCHEMIST_HOME": home}
    command = [str(Path(sys.executable).with_name("alchemist")), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def sessions_stopped(lab: str) -> Iterator[None]:  # noqa: F811 - the imported fixture
    """Stop, at the end, every session still running in the lab's home (a failed test
    leaves the notebook's session behind)."""
    home = str(lab_home(lab))
    yield
    listed = alchemist_cli(home, "session", "list", "--state", "running", "--json")
    assert listed.returncode == 0, listed.stderr
    for s in json.loads(listed.stdout):
        stopped = alchemist_cli(home, "session", "stop", s["id"])
        assert stopped.returncode == 0, stopped.stderr


def shown_lines(rank_output: Any) -> list[str]:
    text = rank_output.locator(".alchemist-rank-lines pre").inner_text()
    return [line for line in text.splitlines() if line]


def test_px_output_streams_per_rank_and_filters_by_rank(
    lab: str,  # noqa: F811 - the imported fixture
    browser: Any,  # noqa: F811 - the imported fixture
    sessions_stopped: None,
) -> None:
    nb = notebook(START)
    nb["cells"] += [{**nb["cells"][1], "source": PX}, {**nb["cells"][1], "source": STOP}]
    put(lab, NAME, {"type": "notebook", "format": "json", "content": nb})
    page = open_and_run(browser, lab, NAME)
    cells = page.locator(".jp-Notebook .jp-Cell")
    px_cell, stop_cell = cells.nth(2), cells.nth(3)
    rank_output = px_cell.locator(".alchemist-rank-output")
    pre = rank_output.locator(".alchemist-rank-lines pre")
    try:
        # Live: the first half of both ranks shows while the cell still runs (it waits
        # for the go-ahead below, so it cannot have ended).
        for rank in (0, 1):
            expect(pre).to_contain_text(expected(rank, 3)[-1], timeout=240_000)
        assert px_cell.locator(".jp-InputPrompt", has_text="[*]").count() == 1
        assert "line 3" not in pre.inner_text()
        put(lab, RELEASE, {"type": "file", "format": "text", "content": ""})
        px_cell.locator(".jp-InputPrompt", has_text="[3]").wait_for(timeout=120_000)
        expect(stop_cell.locator(".jp-OutputArea")).to_contain_text("stopped", timeout=120_000)
        # Every line, each rank's in order.
        for rank in (0, 1):
            expect(pre).to_contain_text(expected(rank)[-1], timeout=30_000)
        lines = shown_lines(rank_output)
        for rank in (0, 1):
            assert [ln for ln in lines if ln.startswith(f"[rank {rank}]")] == expected(rank)
        # The filter, answered by the idle kernel.
        rank_output.get_by_role("button", name="rank 1", exact=True).click()
        expect(pre).not_to_contain_text("[rank 0]", timeout=30_000)
        assert shown_lines(rank_output) == expected(1)
        rank_output.get_by_role("button", name="all ranks", exact=True).click()
        expect(pre).to_contain_text("[rank 0]", timeout=30_000)
        assert sorted(shown_lines(rank_output)) == sorted(expected(0) + expected(1))
        assert "Error displaying widget" not in px_cell.inner_text()
        assert not [e for e in page.alchemist_errors if "widget" in e.lower()], (
            page.alchemist_errors
        )
    except Exception:
        OUTPUT.mkdir(exist_ok=True)
        page.screenshot(path=str(OUTPUT / "session-output-failed.png"), full_page=True)
        raise
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / "session-output.png"), full_page=True)
    page.context.close()
