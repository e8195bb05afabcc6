"""Soak: many tiny jobs through one warm pool and one Jupyter server; what each holds
(file descriptors, memory, processes) must stay flat as the jobs add up, and no job may
fail.

Everything is real: a Jupyter server with Alchemist's extension (this process's
ALCHEMIST_HOME, a warm-pool folder of the part's own), and jobs submitted as the panel
submits them, ``POST /jobs`` with a one-line script (1 worker), each followed over
``GET /jobs/<id>`` to its end (the panel's job view), one job at a time. A first job
starts the pool and is not counted; then, at 0, 1/4, 1/2, 3/4 and all of the jobs done,
the server's and the pool daemon's open file descriptors (``/proc/<pid>/fd``), resident
memory, and processes (each with its descendants), and the job processes left anywhere
(supervisors and ranks: processes whose command line names this part's home). Target:
flat (at the end at most a few more than at 0; memory within 20 % or 30 MB), every job
succeeded, every one started warm.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from scale_parts.common import Series, pct, restore_env
from scale_parts.index import jupyter_server

#: Terminal job states (alchemist.job.spec.JobState).
TERMINAL = ("succeeded", "failed", "cancelled")
#: How long one tiny job may take before it counts as failed.
JOB_TIMEOUT_S = 120.0
#: Flat: at most this many more descriptors or processes at the end than at 0 ...
SLACK = 3
#: ... and memory within this fraction of its value at 0, or this many MB.
MEM_SLACK = (0.20, 30.0)


def _call(base: str, token: str, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"{base}/{path}",
        data=data,
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def _tree(pid: int) -> tuple[int, float, int]:
    """``(open fds, RSS MB, processes)`` of ``pid``: the processes count its
    descendants (zombies included: a leak of unreaped children shows)."""
    proc = psutil.Process(pid)
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    rss = proc.memory_info().rss / 2**20
    return fds, rss, 1 + len(proc.children(recursive=True))


def _job_processes(home: str) -> int:
    """Processes whose command line names ``home`` (a job's supervisor or ranks)."""
    n = 0
    for proc in psutil.process_iter(["cmdline"]):
        with_home = any(home in part for part in (proc.info["cmdline"] or []))
        n += with_home and proc.pid != os.getpid()
    return n


def _server_pid() -> int:
    for child in psutil.Process().children():
        try:
            cmdline = child.cmdline()
        except psutil.Error:  # a child that already ended (a zombie not yet reaped)
            continue
        if "jupyter_server" in " ".join(cmdline):
            return child.pid
    raise RuntimeError("the Jupyter server is not a child of this process")


def run_one(base: str, token: str, i: int) -> tuple[str, float, str]:
    """Submit job ``i`` and follow it to its end: ``(state or error, seconds, job id)``."""
    start = time.perf_counter()
    try:
        job = _call(
            base, token, "POST", "jobs", {"path": "tiny.py", "workers": 1, "name": f"soak-{i}"}
        )
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while job["state"] not in TERMINAL:
            if time.monotonic() > deadline:
                return f"not finished after {JOB_TIMEOUT_S:.0f} s ({job['state']})", 0.0, job["id"]
            time.sleep(0.05)
            job = _call(base, token, "GET", f"jobs/{job['id']}")
    except (OSError, urllib.error.HTTPError, ValueError) as e:
        return f"REST error: {type(e).__name__}: {e}", 0.0, ""
    return job["state"], time.perf_counter() - start, job["id"]


def run(smoke: bool) -> list[Series]:
    n_jobs = 12 if smoke else int(os.environ.get("ALCHEMIST_SOAK_JOBS", "1000"))
    marks = sorted({0, n_jobs // 4, n_jobs // 2, 3 * n_jobs // 4, n_jobs})
    home = os.environ["ALCHEMIST_HOME"]
    pools = tempfile.mkdtemp(prefix="ap-")  # short: a unix socket's path has a limit
    saved = {k: os.environ.get(k) for k in ("ALCHEMIST_POOL_DIR", "ALCHEMIST_POOL_KEEPALIVE")}
    os.environ["ALCHEMIST_POOL_DIR"] = pools
    os.environ["ALCHEMIST_POOL_KEEPALIVE"] = "60"
    root = Path(tempfile.mkdtemp(prefix="scale-soak-nb-"))
    (root / "tiny.py").write_text("print('ok')\n")
    flat = f"flat: at the end <= at 0 + {SLACK}"
    s = {
        "server_fds": Series("Jupyter server: open fds", "jobs", target=flat, value_unit="fds"),
        "server_mb": Series(
            "Jupyter server: RSS", "jobs", target="within 20 % or 30 MB", value_unit="MB"
        ),
        "server_procs": Series(
            "Jupyter server: processes", "jobs", target=flat, value_unit="procs"
        ),
        "pool_fds": Series("warm pool daemon: open fds", "jobs", target=flat, value_unit="fds"),
        "pool_mb": Series(
            "warm pool daemon: RSS", "jobs", target="within 20 % or 30 MB", value_unit="MB"
        ),
        "pool_procs": Series(
            "warm pool daemon: processes", "jobs", target=flat, value_unit="procs"
        ),
        "left": Series(
            "job processes left (supervisors, ranks)", "jobs", target="0", value_unit="procs"
        ),
        "turnaround": Series(
            "job turnaround p50 (POST to end, over REST)", "jobs", target="flat, all warm"
        ),
    }
    outcomes: dict[str, int] = {}
    problems: list[str] = []
    cold: list[str] = []
    took: list[float] = []
    restarts: list[str] = []
    wall0 = time.perf_counter()
    try:
        with jupyter_server(root) as (base, token):
            server = _server_pid()
            first = run_one(base, token, -1)  # starts the pool
            if first[0] != "succeeded":
                raise RuntimeError(f"the first job (it starts the pool) ended {first[0]}")
            pool_pid = first_pool = int(_call(base, token, "GET", "pool")["pid"])
            window: list[float] = []
            for done in range(n_jobs + 1):
                if done in marks:
                    time.sleep(0.5)  # let the last job's processes be reaped
                    now_pool = _call(base, token, "GET", "pool").get("pid")
                    if now_pool and int(now_pool) != pool_pid:
                        # A rebuilt pool (a package installed meanwhile changes the
                        # environment's fingerprint): its jobs started cold; say so.
                        restarts.append(f"{pool_pid} -> {now_pool} before job {done}")
                        pool_pid = int(now_pool)
                    for prefix, pid in (("server", server), ("pool", pool_pid)):
                        fds, mb, procs = _tree(pid)
                        s[f"{prefix}_fds"].add(done, fds)
                        s[f"{prefix}_mb"].add(done, round(mb, 1))
                        s[f"{prefix}_procs"].add(done, procs)
                    s["left"].add(done, _job_processes(home))
                    if window:
                        s["turnaround"].add(done, pct(window, 50))
                        window = []
                if done == n_jobs:
                    break
                state, seconds, job_id = run_one(base, token, done)
                outcomes[state] = outcomes.get(state, 0) + 1
                if state != "succeeded":
                    problems.append(f"job {done} ({job_id or 'not submitted'}): {state}")
                    continue
                window.append(seconds)
                took.append(seconds)
                log = Path(home) / "jobs" / job_id / "logs" / "launcher.log"
                if "warm start:" not in log.read_text(errors="replace"):
                    cold.append(job_id)
            pool_after = _call(base, token, "GET", "pool")
    finally:
        restore_env(saved)
        from alchemist.backends.local.pool import client as pool_client

        for folder in Path(pools).iterdir():
            if folder.is_dir():
                pool_client.stop(folder)
    wall = time.perf_counter() - wall0
    failed = n_jobs - outcomes.get("succeeded", 0)
    for key, series in s.items():
        vals = series.values
        if key.endswith("_mb"):
            series.met = vals[-1] <= max(vals[0] * (1 + MEM_SLACK[0]), vals[0] + MEM_SLACK[1])
        elif key == "left":
            series.met = vals[-1] == 0
        elif key == "turnaround":
            series.met = not cold  # every job started warm
        else:
            series.met = vals[-1] <= vals[0] + SLACK
        series.met = series.met and failed == 0
    s["turnaround"].notes.append(
        f"{n_jobs} jobs of 1 worker, one at a time, in {wall:.0f} s"
        f" ({wall / max(1, n_jobs + 1):.2f} s a job with the samples);"
        f" p50 {pct(took, 50):.2f} s, p95 {pct(took, 95):.2f} s, max {max(took, default=0):.2f} s"
        if took
        else f"{n_jobs} jobs: none succeeded"
    )
    s["turnaround"].notes.append(
        f"outcomes: {json.dumps(outcomes)}; failures: {failed}; cold starts: {len(cold)}"
        f"{' (' + ', '.join(cold[:5]) + ')' if cold else ''}; the pool served"
        f" {pool_after.get('served')} attempts and is pid {pool_after.get('pid')}"
        f" (was {first_pool})"
    )
    if restarts:
        s["turnaround"].notes.append(f"the warm pool was rebuilt: {'; '.join(restarts)}")
    s["turnaround"].notes.extend(problems[:10])
    s["server_fds"].notes.append(
        "sizes are jobs done after the first (which started the pool); the processes count"
        " each daemon with its descendants"
    )
    return list(s.values())
