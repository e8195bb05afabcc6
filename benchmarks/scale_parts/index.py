"""The job index at 1e2 .. 1e5 jobs of one user: ``alchemist jobs``, ``%alchemist_jobs``,
``GET /jobs`` and the panel's poll.

The history is made as submits leave it, without running 1e5 jobs: each job a real job
folder (``spec.json``, ``record.json``, ``state.json`` with its final state) and a row
in the real SQLite index, finished jobs with a few running among them (rows marked
running whose supervisor is gone, reconciled on each listing as a real one would be).
Measured in this process: the CLI's ``main(["jobs"])`` (its work, not the interpreter's
start), the magic through a real IPython shell; over real HTTP from a real Jupyter
server with Alchemist's server extension: ``GET /jobs?limit=20`` and the panel's poll,
``GET /jobs`` exactly as the panel sends it (its default page, 200 jobs with their
latest metric). Target: p95 <= 100 ms at 1e5, exponent ~ 0.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from scale_parts.common import Series, pct, timed

TARGET_S = 0.100


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def jupyter_server(root: Path) -> Iterator[tuple[str, str]]:
    """A real Jupyter server with Alchemist's extension, this process's environment
    (ALCHEMIST_HOME); yields ``(base url, token)``."""
    port, token = _free_port(), secrets.token_hex(16)
    log = open(Path(tempfile.mkdtemp(prefix="scale-jupyter-")) / "server.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            f"--ServerApp.port={port}",
            "--ServerApp.ip=127.0.0.1",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.open_browser=False",
            "--ServerApp.allow_root=True",
            '--ServerApp.jpserver_extensions={"alchemist.server": True}',
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}/alchemist/api/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _get(base, token, "")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the Jupyter server did not start: see {log.name}")
                time.sleep(0.2)
        yield base, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _get(base: str, token: str, path: str) -> dict[str, object]:
    req = urllib.request.Request(f"{base}/{path}", headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def make_history(start: int, stop: int, *, running_every: int = 10_000) -> None:
    """Jobs ``start`` .. ``stop - 1`` of the current user: folders and rows."""
    from sqlalchemy import insert

    from alchemist.job import config
    from alchemist.job.jobdir import JobDir, atomic_write_json
    from alchemist.job.spec import JobSpec
    from alchemist.store import JobRow, get_store

    owner = config.current_user()
    spec = JobSpec(name="hist").to_dict()
    spec_text = json.dumps(spec)
    root = config.jobs_root()
    rows = []
    base = time.time() - 86_400 * 30
    for i in range(start, stop):
        job_id = f"j{i:09d}"
        jd = JobDir(root / job_id)
        jd.create()
        created = base + i * 0.01
        running = i % running_every == running_every // 2
        state = "running" if running else ("failed" if i % 17 == 0 else "succeeded")
        atomic_write_json(jd.spec, spec)
        atomic_write_json(
            jd.record,
            {"id": job_id, "owner": owner, "name": "hist", "backend": "local", "created": created},
        )
        if not running:
            jd.write_state(state=state, finished=created + 5, started=created + 1)
        rows.append(
            {
                "id": job_id,
                "owner": owner,
                "name": "hist",
                "backend": "local",
                "state": state,
                "reason": None,
                "created": created,
                "started": created + 1,
                "finished": None if running else created + 5,
                "restarts": 0,
                "spec": spec_text,
                "job_dir": str(jd.root),
            }
        )
    store = get_store()
    with store.engine.begin() as conn:
        for k in range(0, len(rows), 5000):
            conn.execute(insert(JobRow), rows[k : k + 5000])


def run(smoke: bool) -> list[Series]:
    from IPython.core.interactiveshell import InteractiveShell

    from alchemist import cli, client

    sizes = [30, 300] if smoke else [100, 1_000, 10_000, 100_000]
    repeat = 5 if smoke else 40
    target = f"p95 <= {TARGET_S * 1000:.0f} ms at {sizes[-1]:.0e}, exponent ~ 0"
    series = {
        "cli": Series("alchemist jobs (in process)", "jobs", target=target),
        "magic": Series("%alchemist_jobs", "jobs", target=target),
        "rest": Series("GET /jobs?limit=20", "jobs", target=target),
        "panel": Series("panel poll: GET /jobs (200 a page)", "jobs", target=target),
    }
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "alchemist")

    def quiet(fn: object) -> object:
        def call() -> None:
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                fn()  # type: ignore[operator]

        return call

    notebook_root = Path(tempfile.mkdtemp(prefix="scale-index-nb-"))
    made = 0
    first_scan: list[str] = []
    with jupyter_server(notebook_root) as (base, token):
        for size in sizes:
            t0 = time.perf_counter()
            make_history(made, size)
            made = size
            built = time.perf_counter() - t0
            start = time.perf_counter()
            page = client.list_jobs(limit=20)  # the first listing (a full scan, once)
            first = time.perf_counter() - start
            assert len(page.jobs) == 20 and page.next, "a page of 20 with more after it"
            first_scan.append(
                f"{size:.0e}: history made in {built:.1f} s, first listing {first * 1000:.0f} ms"
            )
            arms = {
                "cli": quiet(lambda: cli.main(["jobs"])),
                "magic": quiet(lambda: shell.run_line_magic("alchemist_jobs", "")),
                "rest": lambda: _get(base, token, "jobs?limit=20"),
                "panel": lambda: _get(base, token, "jobs?state="),
            }
            reply = _get(base, token, "jobs?state=")
            assert len(reply["jobs"]) == min(200, size), len(reply["jobs"])  # type: ignore[arg-type]
            for name, fn in arms.items():
                times = timed(fn, repeat)  # type: ignore[arg-type]
                series[name].add(size, pct(times, 95))
    for s in series.values():
        s.met = s.values[-1] <= TARGET_S and (s.exponent or 0) < 0.25
    series["cli"].notes.append(
        "in process: main(['jobs']) after imports; a fresh `alchemist jobs` adds the"
        " interpreter's start and imports"
    )
    series["panel"].notes.extend(first_scan)
    # One real `alchemist jobs` process at the largest size, for scale.
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "alchemist.cli", "jobs"],
        capture_output=True,
        check=True,
        env=os.environ.copy(),
    )
    series["cli"].notes.append(
        f"one `python -m alchemist.cli jobs` process at {sizes[-1]:.0e}: {time.perf_counter() - t0:.2f} s wall"
    )
    return list(series.values())
