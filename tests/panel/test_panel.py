"""The Alchemist side panel in a real JupyterLab, driven in headless Chromium.

A real ``jupyter lab`` (with the prebuilt panel and the REST server extension, under a
JupyterHub-like base URL) runs real jobs on the local backend; Playwright drives the
system Chromium. Needs ``scripts/setup.d/60-labextension.sh`` (the built panel) and
Chromium at /usr/bin/chromium; skips itself with the fix named when either is missing.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.conftest import processes_under

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
BASE_URL = "/user/tester/"
TOKEN = "alchemist-browser-test"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]

TRAIN = """\
import alchemist

ctx = alchemist.context()
for step in range(20):
    alchemist.log(step, loss=(1.0 + ctx.rank) / (step + 1))  # one curve per rank
print(f"hello from rank {ctx.rank} of {ctx.world_size}", flush=True)
"""

LONG = """\
import time

print("long job started", flush=True)
time.sleep(600)
"""

NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": ["# jobs get attached below"],
        }
    ],
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


class Lab:
    """A running ``jupyter lab`` and where to reach it."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, root: Path, home: Path) -> None:
        self.proc, self.url, self.root, self.home = proc, url, root, home

    def api(self, path: str, method: str = "GET", body: Any = None) -> Any:
        request = urllib.request.Request(
            f"{self.url}alchemist/api/v1/{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {TOKEN}"},
        )
        with urllib.request.urlopen(request, timeout=30) as r:
            return json.loads(r.read())


def start_lab(tmp: Path, *, server_extension: bool = True) -> Iterator[Lab]:
    """Start JupyterLab with its own config, settings, workspaces and ALCHEMIST_HOME."""
    if not CHROMIUM.exists():
        pytest.skip("Chromium missing: apt-get install -y chromium (scripts/setup.d/20-browser.sh)")
    if not (REPO / "alchemist" / "labextension" / "package.json").exists():
        pytest.skip("the panel is not built: run scripts/setup.d/60-labextension.sh")
    root, home, config, settings = (tmp / d for d in ("root", "home", "config", "settings"))
    for d in (root, home, config, settings / "alchemist-jupyterlab"):
        d.mkdir(parents=True)
    (root / "train.py").write_text(TRAIN)
    (root / "long.py").write_text(LONG)
    (root / "attach.ipynb").write_text(json.dumps(NOTEBOOK))
    # Poll faster than the default so the test sees changes sooner (and the schema loads).
    (settings / "alchemist-jupyterlab" / "plugin.jupyterlab-settings").write_text(
        json.dumps({"pollInterval": 500})
    )
    news = settings / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
    if not server_extension:
        (config / "jupyter_server_config.json").write_text(
            json.dumps({"ServerApp": {"jpserver_extensions": {"alchemist.server": False}}})
        )
    port = _free_port()
    env = {
        **os.environ,
        "ALCHEMIST_HOME": str(home),
        "JUPYTER_CONFIG_DIR": str(config),
        "OMP_NUM_THREADS": "1",
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    env.pop("JUPYTERHUB_USER", None)
    log = open(tmp / "lab.log", "wb")  # noqa: SIM115 - closed after the server stops
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--ServerApp.base_url={BASE_URL}",
            f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={root}",
            f"--LabApp.user_settings_dir={settings}",
            f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
        ],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}{BASE_URL}"
    lab = Lab(proc, url, root, home)
    try:
        deadline = time.monotonic() + 60
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
        yield lab
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        left = processes_under(home)
        for p in left:
            p.kill()
        assert not left, f"jobs left running: {[p.cmdline() for p in left]}"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from start_lab(tmp_path_factory.mktemp("lab"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip("Chromium missing: apt-get install -y chromium (scripts/setup.d/20-browser.sh)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def page(lab: Lab, browser: Any) -> Iterator[Any]:
    """JupyterLab with attach.ipynb open and the Alchemist panel shown."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{lab.url}lab/tree/attach.ipynb?reset&token={TOKEN}")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for()
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="alchemist-panel"]').click()
    page.locator("#alchemist-panel .jp-Alchemist-form").wait_for()
    yield page
    context.close()


def fill_form(page: Any, path: str, workers: int, name: str) -> None:
    panel = page.locator("#alchemist-panel")
    panel.locator("input[name=path]").fill(path)
    panel.locator("input[name=workers]").fill(str(workers))
    panel.locator("input[name=name]").fill(name)
    panel.locator("textarea[name=env]").fill("OMP_NUM_THREADS=1")


def job_view(page: Any, name: str) -> Any:
    """The job view (main area) of the job called ``name``, once it opened."""
    view = page.locator(
        ".jp-Alchemist-jobView", has=page.locator(f'.jp-Alchemist-spec:has-text("{name}")')
    )
    view.wait_for()
    return view


CURVE_PIXELS_JS = """([metric, rgb]) => {
    const c = document.querySelector(`.jp-Alchemist-chart[data-metric="${metric}"] canvas`);
    if (!c) return 0;
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) {
        if (d[i + 3] > 100 && Math.abs(d[i] - rgb[0]) < 40 && Math.abs(d[i + 1] - rgb[1]) < 40 &&
            Math.abs(d[i + 2] - rgb[2]) < 40) n++;
    }
    return n;
}"""


def wait_for_curve(page: Any, metric: str, rgb: tuple[int, int, int], pixels: int = 50) -> None:
    """Wait until ``metric``'s chart canvas shows a line in ``rgb`` (a rank's colour)."""
    try:
        page.wait_for_function(
            f"args => ({CURVE_PIXELS_JS})(args) > {pixels}", arg=[metric, list(rgb)], timeout=20_000
        )
    except Exception:
        page.screenshot(path=str(Path(os.environ.get("TMPDIR", "/tmp")) / "alchemist-curve.png"))
        raise


def test_run_as_job_from_the_file_browser_fills_the_form(page: Any) -> None:
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="filebrowser"]').click()
    item = page.locator(".jp-DirListing-item", has_text="train.py")
    # select it first, as a user's click does: the command runs the selected file, and a
    # right-click alone raced the listing's re-render (the open notebook stayed selected).
    # A click that lands while the listing refreshes after the tab switch is lost with the
    # refresh (JupyterLab 4.6): click again, as a user would, until the item is selected.
    selected = re.compile(r"\bjp-mod-selected\b")
    for _ in range(10):
        item.click()
        try:
            expect(item).to_have_class(selected, timeout=2_000)
            break
        except AssertionError:
            continue
    expect(item).to_have_class(selected)
    item.click(button="right")
    page.locator(".lm-Menu-item", has_text="Run as Alchemist Job").click()
    path = page.locator("#alchemist-panel input[name=path]")
    path.wait_for()
    assert path.input_value() == "train.py"


def test_launch_a_two_worker_script_and_watch_it_succeed(page: Any, lab: Lab) -> None:
    fill_form(page, "train.py", 2, "curve-run")
    panel = page.locator("#alchemist-panel")
    # the options box lists the chosen algorithm's options with their defaults
    options = panel.locator("textarea[name=algorithm_options]")
    algorithm = panel.locator("select[name=algorithm]")
    algorithm.select_option("bmuf")
    expect(options).to_have_attribute("placeholder", re.compile(r"^block_size=16\n"))
    expect(options).to_have_attribute("title", re.compile(r"block_size=16: local steps"))
    algorithm.select_option("sync")
    expect(options).to_have_attribute("placeholder", re.compile(r"^bucket_cap_mb=25\n"))
    # a misspelt algorithm option: the server's one line, the field marked, nothing run
    options.fill("bucket_cap=4")
    panel.get_by_role("button", name="Dry run").click()
    panel.locator(".jp-Alchemist-message", has_text="unknown option(s) bucket_cap").wait_for()
    expect(options).to_have_attribute("aria-invalid", "true")
    options.fill("bucket_cap_mb=4\nstatic_graph=true")
    # the fields the server's job options add (alchemist/job/options.py), with their defaults
    restarts = panel.locator("input[name=max_restarts]")
    expect(restarts).to_have_attribute("placeholder", "0")
    for name in ("image", "cpu", "memory"):
        panel.locator(f"input[name={name}]").wait_for()
    batch = panel.locator("input[name=global_batch]")
    batch.fill("3")  # not a multiple of the world size 2: the server's one line
    panel.get_by_role("button", name="Dry run").click()
    panel.locator(".jp-Alchemist-message", has_text="use 2 or 4").wait_for()
    batch.fill("8")
    restarts.fill("1")
    panel.locator("input[name=timeout]").fill("600")
    panel.get_by_role("button", name="Dry run").click()
    dry = panel.locator(".jp-Alchemist-dryrun")
    dry.filter(has_text="world size 2").wait_for()
    assert "nothing was submitted" in dry.inner_text()
    assert lab.api("jobs")["jobs"] == []

    panel.get_by_role("button", name="Submit").click()
    view = job_view(page, "curve-run")
    view.locator(".jp-Alchemist-jobHeader .jp-Alchemist-state", has_text="succeeded").wait_for(
        timeout=180_000
    )
    # the whole curves arrive (20 steps) and are drawn, one line per rank in its colour
    view.locator('.jp-Alchemist-chart[data-metric="loss"][data-points="20"]').wait_for()
    wait_for_curve(page, "loss", (0x1F, 0x77, 0xB4))  # rank 0
    wait_for_curve(page, "loss", (0xFF, 0x7F, 0x0E))  # rank 1

    logs = view.locator(".jp-Alchemist-logs")
    logs.filter(has_text="hello from rank 0 of 2").wait_for()
    view.locator("select[name=rank]").select_option("1")
    logs.filter(has_text="hello from rank 1 of 2").wait_for()

    # the list shows it, newest first, with its state and the latest loss
    (job,) = lab.api("jobs")["jobs"]
    assert job["spec"]["algorithm_options"] == {"bucket_cap_mb": 4, "static_graph": True}
    spec = job["spec"]
    assert (spec["max_restarts"], spec["timeout"], spec["global_batch"]) == (1, 600, 8)
    row = panel.locator(f'.jp-Alchemist-job[data-job-id="{job["id"]}"]')
    row.locator(".jp-Alchemist-state", has_text="succeeded").wait_for()
    assert row.locator(".jp-Alchemist-metric").inner_text() == "loss 0.05 @ 19"

    # the job's ranks came from the user's warm pool, which the panel shows and stops
    pool = panel.locator(".jp-Alchemist-pool")
    pool.filter(has_text=re.compile(r"warm pool: idle .* jobs? served")).wait_for()
    pool.get_by_role("button", name="Stop").click()
    pool.filter(has_text="warm pool: none").wait_for()


def test_cancel_a_long_job_from_its_view(page: Any, lab: Lab) -> None:
    fill_form(page, "long.py", 2, "long-run")
    page.locator("#alchemist-panel").get_by_role("button", name="Submit").click()
    view = job_view(page, "long-run")
    view.locator(".jp-Alchemist-jobHeader .jp-Alchemist-state", has_text="running").wait_for(
        timeout=120_000
    )
    # Diagnose: the headline (a sleeping job logs no steps: whatever class it reads as)
    # and one line per rank, from GET jobs/<id>/diagnosis; no stall note (no steps).
    view.locator(".jp-Alchemist-logs", has_text="long job started").wait_for()
    view.get_by_role("button", name="Diagnose").click()
    headline = view.locator(".jp-Alchemist-diagnosisHeadline strong")
    headline.wait_for()
    assert headline.inner_text().strip()
    ranks = view.locator(".jp-Alchemist-diagnosis li[data-rank]")
    expect(ranks).to_have_count(2)
    texts = ranks.all_inner_texts()
    assert re.match(r"rank 0\s+running", texts[0]) and texts[1].startswith("rank 1"), texts
    # next to it, the debug bundle as a download (the browser's login cookie goes with it)
    link = view.locator("a.jp-Alchemist-diagnosisBundle")
    expect(link).to_have_attribute("download", re.compile(r"^alchemist-\w+-debug\.tar\.gz$"))
    href = link.evaluate("a => a.href")
    named = re.fullmatch(r"alchemist-(\w+)-debug\.tar\.gz", link.get_attribute("download") or "")
    assert named and href.endswith(f"/alchemist/api/v1/jobs/{named[1]}/diagnosis/bundle"), href
    bundle = page.request.get(href)
    assert bundle.ok and bundle.body()[:2] == b"\x1f\x8b", (bundle.status, bundle.text()[:200])
    expect(view.locator(".jp-Alchemist-stalled")).to_have_text("")
    view.get_by_role("button", name="Cancel").click()
    view.locator(".jp-Alchemist-jobHeader .jp-Alchemist-state", has_text="cancelled").wait_for()
    (job,) = [j for j in lab.api("jobs")["jobs"] if j["name"] == "long-run"]
    assert job["state"] == "cancelled"
    deadline = time.monotonic() + 30
    while processes_under(Path(job["job_dir"])) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes_under(Path(job["job_dir"])), "workers still running after cancel"
    # the state filter shows it among the cancelled jobs only
    panel = page.locator("#alchemist-panel")
    panel.locator("select[name=state]").select_option("cancelled")
    # the list re-renders when the filter's request returns: wait for it, do not sample
    expect(panel.locator(".jp-Alchemist-job")).to_have_count(1)
    expect(panel.locator(".jp-Alchemist-job .jp-Alchemist-state")).to_have_text("cancelled")
    panel.locator("select[name=state]").select_option("")


def test_insert_attach_cell_into_the_notebook(page: Any, lab: Lab) -> None:
    (job,) = [j for j in lab.api("jobs")["jobs"] if j["name"] == "curve-run"]
    page.locator(f'.lm-TabBar-tab:has-text("curve-run ({job["id"]})")').click()
    view = job_view(page, "curve-run")
    view.get_by_role("button", name="Insert attach cell").click()
    cells = page.locator(".jp-Notebook .jp-Cell .cm-content")
    cells.filter(has_text=f"%alchemist_attach {job['id']}").wait_for()
    expect(cells).to_have_count(2)


def test_command_palette_lists_the_panel_actions(page: Any) -> None:
    page.keyboard.press("Control+Shift+C")
    palette = page.locator(".jp-ModalCommandPalette")
    palette.locator("input").fill("Alchemist")
    for label in (
        "Alchemist: Show Jobs Panel",
        "Alchemist: Open Job…",
        "Alchemist: Cancel Job…",
        "Alchemist: Insert Attach Cell…",
        "Alchemist: Submit the Launch Form",
    ):
        palette.locator(".lm-CommandPalette-itemLabel", has_text=label).wait_for()
    page.keyboard.press("Escape")


def test_panel_polls_only_while_visible(page: Any) -> None:
    """With the panel hidden (another sidebar tab shown), neither the job list nor the
    sweeps are requested; shown again, both are."""
    from urllib.parse import urlparse

    seen: list[str] = []

    def on_request(request: Any) -> None:
        if urlparse(request.url).path.endswith(("/alchemist/api/v1/jobs", "/api/v1/sweeps")):
            seen.append(urlparse(request.url).path)

    page.on("request", on_request)
    try:
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="filebrowser"]').click()
        page.wait_for_timeout(1000)  # let a request already in flight finish
        seen.clear()
        page.wait_for_timeout(3000)  # 6 poll intervals (pollInterval is 500 ms here)
        assert seen == [], f"hidden panel polled: {seen}"
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="alchemist-panel"]').click()
        deadline = time.monotonic() + 10
        while len({p.rsplit("/", 1)[1] for p in seen}) < 2 and time.monotonic() < deadline:
            page.wait_for_timeout(100)
        assert {p.rsplit("/", 1)[1] for p in seen} == {"jobs", "sweeps"}, (
            f"the panel did not poll both lists again once shown: {seen}"
        )
    finally:
        page.remove_listener("request", on_request)


ADD_OLD_JOBS = """
import sys, time
from alchemist.job import config
from alchemist.job.spec import JobSpec
from alchemist.store import JobRecord, get_store

n, now = int(sys.argv[1]), time.time()
for i in range(n):
    get_store().add(JobRecord(
        id=f"old-{i:03d}", owner=config.current_user(), name=f"old-{i:03d}",
        backend="local", state="succeeded", reason=None, created=now - 86400 - i,
        started=None, finished=now - 86400 - i, restarts=0,
        spec=JobSpec(name=f"old-{i:03d}").to_dict(),
        job_dir=str(config.jobs_root() / f"old-{i:03d}"),
    ))
"""


def test_older_jobs_beyond_the_first_page_come_with_a_button(page: Any, lab: Lab) -> None:
    """A history longer than a page (the server's 200): the panel polls only the newest
    page; "Older jobs" fetches the next one (``?before=``), and hides on the last."""
    subprocess.run(
        [sys.executable, "-c", ADD_OLD_JOBS, "205"],
        env={**os.environ, "ALCHEMIST_HOME": str(lab.home)},
        check=True,
    )
    panel = page.locator("#alchemist-panel")
    newest, oldest = (
        panel.locator('[data-job-id="old-000"]'),
        panel.locator('[data-job-id="old-204"]'),
    )
    newest.wait_for()  # the next poll lists the newest page
    older = panel.locator("button.jp-Alchemist-older")
    expect(older).to_be_visible()
    expect(oldest).to_have_count(0)
    older.click()
    oldest.wait_for()
    expect(older).to_be_hidden()
    expect(panel.locator('[data-job-id^="old-"]')).to_have_count(205)
    page.wait_for_timeout(1500)  # three polls later the older page is still shown
    expect(panel.locator('[data-job-id^="old-"]')).to_have_count(205)


WRITE_SWEEP = """
import json, sys, time
from alchemist.job import config
from alchemist.job.jobdir import atomic_write_json
from alchemist.job.sweepdir import SweepDir
from alchemist.sweep.space import parse_params
from alchemist.sweep.spec import SweepSpec

# A finished sweep's files as its driver leaves them (tests/sweep/test_sweep_cli_rest.py).
sweep_id, trials = sys.argv[1], json.loads(sys.argv[2])
spec = SweepSpec.make("lrgrid", parse_params(["lr=0.1,0.01,0.001,0.0001"]), "val_loss", mode="min")
sd = SweepDir(config.sweeps_root() / sweep_id).create()
record = {**spec.to_dict(), "created": time.time(), "owner": config.current_user()}
atomic_write_json(sd.config, record)
sd.write_state(state="succeeded", reason=None)
best = min((t for t in trials if t["state"] == "complete"), key=lambda t: t["value"])
atomic_write_json(sd.trials, {"sweep_id": sweep_id, "trials": trials, "best": best})
"""


def _trial(
    number: int, lr: float, state: str, value: float | None, reason: str | None = None
) -> dict[str, Any]:
    return {
        "number": number,
        "params": {"lr": lr},
        "state": state,
        "job_id": f"j{number:010d}",
        "value": value,
        "step": None if value is None else 9,
        "started": 1.0,
        "finished": 2.0,
        "reason": reason,
    }


def test_a_finished_sweep_shows_its_trials_best_first(page: Any, lab: Lab) -> None:
    """A sweep (its files written as its driver leaves them; no trial runs): one row with
    its state, trials done and best, and on a click its trials best first by the
    objective (here minimised), and no Cancel since it is over."""
    sweep_id = "w00000000aa"
    trials = [
        _trial(0, 0.1, "complete", 0.4),
        _trial(1, 0.01, "complete", 0.21),
        _trial(2, 0.001, "pruned", 0.9, "pruned by sweep at step 9: val_loss=0.9, worse"),
        _trial(3, 0.0001, "failed", None, "failed: CUDA out of memory"),
    ]
    subprocess.run(
        [sys.executable, "-c", WRITE_SWEEP, sweep_id, json.dumps(trials)],
        env={**os.environ, "ALCHEMIST_HOME": str(lab.home)},
        check=True,
    )
    assert [s["id"] for s in lab.api("sweeps")["sweeps"]] == [sweep_id]
    panel = page.locator("#alchemist-panel")
    section = panel.locator("details.jp-Alchemist-sweepsSection")
    expect(section.locator("summary")).to_have_text("Sweeps (1)")  # the next poll lists it
    section.locator("summary").click()
    row = section.locator(f'.jp-Alchemist-sweep[data-sweep-id="{sweep_id}"]')
    expect(row.locator(".jp-Alchemist-sweepName")).to_have_text("lrgrid")
    expect(row.locator(".jp-Alchemist-state")).to_have_text("succeeded")
    expect(row.locator(".jp-Alchemist-sweepProgress")).to_have_text("4/4 trials")
    expect(row.locator(".jp-Alchemist-sweepBest")).to_have_text("val_loss=0.21 (lr=0.01)")

    row.click()
    expect(row).to_have_attribute("aria-expanded", "true")
    detail = section.locator(".jp-Alchemist-sweepDetail")
    expect(detail.locator(".jp-Alchemist-sweepSpec")).to_contain_text("minimise val_loss")
    table = detail.locator("table.jp-Alchemist-trials")
    expect(table.locator("th")).to_have_text(["#", "Setting", "State", "Step", "val_loss"])
    rows = table.locator("tbody[data-trial]")  # a trial's row, and why it stopped below it
    expect(rows).to_have_count(4)
    # best first: the complete trials by value, then the pruned one, then none
    assert [r.get_attribute("data-trial") for r in rows.all()] == ["1", "0", "2", "3"]
    cells = [c.strip() for c in rows.nth(0).locator("td").all_inner_texts()]
    assert cells == ["1", "lr=0.01", "complete", "9", "0.21"], cells
    cells = [c.strip() for c in rows.nth(3).locator("td").all_inner_texts()]
    assert cells == ["3", "lr=0.0001", "failed", "-", "-", "", "failed: CUDA out of memory"]
    expect(rows.nth(2).locator(".jp-Alchemist-trialReason")).to_have_text(
        re.compile(r"^pruned by sweep at step 9")
    )
    # a finished sweep offers no Cancel
    expect(detail.get_by_role("button", name="Cancel")).to_have_count(0)
    # a trial's row opens its job's view, as the jobs list does
    rows.nth(0).click()
    page.locator('.lm-TabBar-tab:has-text("j0000000001")').wait_for()
    # a second click on the sweep closes it
    row.click()
    expect(row).to_have_attribute("aria-expanded", "false")
    expect(detail).to_have_count(0)


def test_missing_server_extension_gets_one_clear_message(tmp_path: Path, browser: Any) -> None:
    for lab in start_lab(tmp_path, server_extension=False):
        context = browser.new_context()
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(f"{lab.url}lab?reset&token={TOKEN}")
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="alchemist-panel"]').click()
        message = page.locator('#alchemist-panel .jp-Alchemist-message[data-kind="error"]')
        message.wait_for()
        assert "server extension is not running" in message.inner_text()
        assert "jupyter server extension enable alchemist.server" in message.inner_text()
        context.close()
