"""Fixtures of the metrics tests: a real finished job, a writer-process stand-in, and a
real JupyterLab with headless Chromium (``lab``, ``browser``) with the helpers that drive
them (``open_and_run``, ``wait_for_monitor``, ``POINTS_JS``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alchemist.backends.api import LogChunk
from alchemist.job.jobdir import JobDir
from alchemist.job.spec import JobState, JobStatus
from alchemist.metrics.tail import read_lines
from tests.conftest import processes_under
from tests.support.lab import (
    CHROMIUM,
    CHROMIUM_ARGS,
    CURVES_CELL,
    LONG_CELL,
    TOKEN,
    free_port,
    notebook,
)

#: The cell of the real job: 2 ranks, a loss and an accuracy per step, ~3 s of logging
#: so that the system sampler (first sample after 1 s) writes too.
TRAINING_CELL = """
import time
import alchemist
ctx = alchemist.context()
alchemist.log(0, total_steps=40, batch_size=16)
for step in range(40):
    alchemist.log(step, loss=1.0 / (step + 1) + ctx.rank, acc=step / 40)
    time.sleep(0.075)
print(f"rank {ctx.rank} finished training")
"""


@pytest.fixture(scope="session")
def finished_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real 2-worker job on the local backend (torchrun), run to success once per session."""
    from alchemist import client

    home = tmp_path_factory.mktemp("finished-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ALCHEMIST_HOME", str(home))
        mp.setenv("OMP_NUM_THREADS", "1")
        job = client.submit(TRAINING_CELL, workers=2, name="curves")
        status = job.wait(timeout=240)
        assert status.state == JobState.SUCCEEDED, job.logs()
        yield job


WRITER = r"""
import sys, time
from pathlib import Path
from alchemist.job.jobdir import JobDir
from alchemist.metrics.reporter import Reporter
root, n, pause = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
log = open(JobDir(root).rank_log(0), "a", buffering=1)
rep = Reporter(JobDir(root), job_id=root.name, rank=0, tensorboard=False)
rep.log(0, total_steps=n)
for i in range(n):
    rep.log(i, loss=1.0 / (i + 1))
    if i % 20 == 0:
        print(f"step {i}", file=log)
    time.sleep(pause)
rep.close()
print("writer done", file=log)
"""


class WriterProcessJob:
    """Stands in for ``alchemist.client.Job`` around one real writer process.

    The process writes rank 0's metrics file through the real :class:`Reporter` and a rank
    log; the job's state is the process's (running, then succeeded or cancelled). It
    implements the monitor's ``MonitoredJob`` protocol so the monitor is tested on a
    job whose pace the test controls, without torchrun's start-up time.
    """

    def __init__(self, root: Path, n: int, pause: float) -> None:
        self.job_dir = JobDir(root).create()
        self.id = root.name
        self.name = "writer"
        self.started = time.time()
        self.cancelled = False
        self.proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(n), str(pause)])

    def status(self) -> JobStatus:
        code = self.proc.poll()
        if code is None:
            return JobStatus(JobState.RUNNING, started=self.started)
        if self.cancelled:
            state, reason = JobState.CANCELLED, "cancelled by the user"
        elif code == 0:
            state, reason = JobState.SUCCEEDED, None
        else:
            state, reason = JobState.FAILED, f"writer exited with {code}"
        return JobStatus(state, reason=reason, exit_code=code, started=self.started,
                         finished=time.time())  # fmt: skip

    def log_chunk(self, rank: int, since: int = 0, limit_bytes: int = 1 << 20) -> LogChunk:
        lines, cursor, more = read_lines(self.job_dir.rank_log(rank), since, limit_bytes)
        return LogChunk(rank, lines, cursor, more)

    def cancel(self) -> None:
        if self.proc.poll() is None:
            self.cancelled = True
            self.proc.kill()
            self.proc.wait()

    def to_dict(self) -> dict[str, Any]:
        st = self.status()
        return {
            "id": self.id, "name": self.name, "state": st.state.value, "reason": st.reason,
            "started": st.started, "finished": st.finished, "workers": 1,
            "gpus_per_worker": 0, "world_size": 1, "algorithm": "sync",
        }  # fmt: skip

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def writer_job(tmp_path: Path) -> Iterator[Any]:
    """Factory of :class:`WriterProcessJob`; every writer is reaped at the end."""
    made: list[WriterProcessJob] = []

    def make(n: int = 150, pause: float = 0.02) -> WriterProcessJob:
        job = WriterProcessJob(tmp_path / f"jw{len(made)}", n, pause)
        made.append(job)
        return job

    yield make
    for job in made:
        job.close()


@pytest.fixture
def ip() -> Iterator[Any]:
    """A real IPython shell (the same one the magic tests use)."""
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.reset()
    yield shell
    shell.reset()


# -- a real JupyterLab in headless Chromium (the monitor's browser tests) -----------------


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
    port = free_port()
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
