"""Users: accounts of the embedded hub submitting, listing and polling at once.

Everything is real: ``python -m alchemist.hub.embedded`` (JupyterHub, its
configurable-http-proxy, one JupyterLab server per user, run as the user's own system
account when this runs as root), accounts made with ``add-user``, each user logged in
through the hub's login form and given an API token. Every request goes through the
proxy to the user's own server, as the side panel's do. Each user, on a thread of its
own, acts as an open panel: every 2 s (the panel's default) the list (``GET /jobs`` as
the panel sends it) and the pool line (``GET /pool``); a job it submitted (``POST
/jobs``, a one-line script, 1 worker, every ``SUBMIT_EVERY_S``) is opened as the panel
opens it (``GET /jobs/<id>``, ``/metrics``, ``/logs`` each poll until it ended). After
the duration every submitted job is awaited. Measured at several user counts (the
servers of all are up throughout): REST p95 latency of every request and of submits,
and errors (a reply other than 2xx, or none). The hub, the proxy and the queue must
hold: 0 errors, every job finished and none failed, the hub and the proxy still
answering and no queue ticket left.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import pwd
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import requests

from scale_parts.common import Series, pct

REPO = Path(__file__).resolve().parents[2]
PROXY = REPO / ".cache" / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
API = "alchemist/api/v1"
POLL_S = 2.0  # the panel's default poll interval
SUBMIT_EVERY_S = 30.0
TERMINAL = ("succeeded", "failed", "cancelled")
#: The hub's own config, then the queue folder every user's server is given (the
#: part's own, reachable by every account, mode 1777 as the machine's default is).
CONFIG = """\
from alchemist.hub.embedded.config import configure
c = get_config()  # noqa: F821
configure(c)
c.Spawner.environment = {{"ALCHEMIST_ADMISSION_DIR": {admission!r}, "OMP_NUM_THREADS": "1"}}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, check: Any, timeout: float, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@dataclass
class Hub:
    url: str
    env: dict[str, str]
    proc: subprocess.Popen[bytes]
    log: Path
    admission: Path
    users: list[str] = field(default_factory=list)

    def add_user(self, name: str, password: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "alchemist.hub.embedded", "add-user", name, "--password-stdin"],
            env=self.env,
            input=password + "\n",
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"add-user {name}: {done.stderr.strip()}")
        self.users.append(name)


@contextlib.contextmanager
def embedded_hub() -> Iterator[Hub]:
    """A real embedded hub on free ports, its state and homes in a temporary folder;
    stopped afterwards with every process of its users, and their accounts removed."""
    if not PROXY.exists():
        raise RuntimeError("configurable-http-proxy is missing: run bash scripts/setup.d/10-hub.sh")
    tmp = Path(tempfile.mkdtemp(prefix="alchemist-scale-hub-"))
    os.chmod(tmp, 0o755)  # the users' homes and the queue are under it
    homes, admission = tmp / "homes", tmp / "admission"
    homes.mkdir(mode=0o755)
    admission.mkdir()
    os.chmod(admission, 0o1777)
    (tmp / "jupyterhub_config.py").write_text(CONFIG.format(admission=str(admission)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ALCHEMIST_", "JUPYTER"))}
    env.update(
        ALCHEMIST_HUB_DIR=str(tmp / "state"),
        ALCHEMIST_HUB_HOME_BASE=str(homes),
        ALCHEMIST_HUB_PORT=str(_free_port()),
        ALCHEMIST_HUB_API_PORT=str(_free_port()),
        ALCHEMIST_HUB_PROXY_PORT=str(_free_port()),
        ALCHEMIST_HUB_ADMIN=f"scaleadmin-{secrets.token_hex(3)}",
        ALCHEMIST_HUB_PROXY_CMD=str(PROXY),
        ALCHEMIST_HUB_CONFIG=str(tmp / "jupyterhub_config.py"),
    )
    log = tmp / "hub.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "alchemist.hub.embedded"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    hub = Hub(f"http://127.0.0.1:{env['ALCHEMIST_HUB_PORT']}/", env, proc, log, admission)
    try:

        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"the hub exited with {proc.returncode}: see {log}")
            with contextlib.suppress(requests.RequestException):
                return requests.get(hub.url + "hub/api/", timeout=5).status_code == 200
            return False

        _wait("the hub to answer", up, timeout=90)
        yield hub
    finally:
        _stop(hub)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


def _stop(hub: Hub) -> None:
    from alchemist.hub.embedded.accounts import remove_system_account

    if hub.proc.poll() is None:
        hub.proc.send_signal(signal.SIGTERM)
        try:
            hub.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(hub.proc.pid, signal.SIGKILL)
            hub.proc.wait(timeout=10)
    # The users' warm pools (sessions of their own) outlive the hub by design.
    owners = set(hub.users)
    for proc in psutil.process_iter(["username"]):
        if proc.info["username"] in owners:
            with contextlib.suppress(psutil.Error):
                proc.kill()
    time.sleep(1)
    if os.geteuid() == 0:
        for name in hub.users:
            with contextlib.suppress(KeyError):
                pwd.getpwnam(name)
                remove_system_account(name)


class User:
    """A hub user with a token, acting as an open side panel on a thread."""

    def __init__(self, hub: Hub, name: str, password: str) -> None:
        self.hub, self.name = hub, name
        login = requests.Session()
        login.get(hub.url + "hub/login", timeout=60)
        answer = login.post(
            hub.url + "hub/login",
            data={"username": name, "password": password, "_xsrf": login.cookies["_xsrf"]},
            allow_redirects=False,
            timeout=60,
        )
        if answer.status_code != 302:
            raise RuntimeError(f"{name} could not log in: {answer.status_code}")
        made = login.post(
            hub.url + f"hub/api/users/{name}/tokens",
            json={"note": "scale benchmark"},
            headers={"X-XSRFToken": login.cookies.get("_xsrf") or ""},
            timeout=60,
        )
        if made.status_code != 201:
            raise RuntimeError(f"{name} got no token: {made.status_code} {made.text[:200]}")
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"token {made.json()['token']}"
        self.lock = threading.Lock()
        self.times: list[tuple[str, float]] = []  # (route kind, seconds) of 2xx replies
        self.errors: list[str] = []
        self.jobs: list[str] = []

    def hub_api(self, method: str, path: str) -> requests.Response:
        return self.session.request(method, self.hub.url + "hub/api/" + path, timeout=60)

    def spawn(self) -> None:
        answer = self.hub_api("POST", f"users/{self.name}/server")
        if answer.status_code not in (201, 202):
            raise RuntimeError(f"{self.name}'s server: {answer.status_code} {answer.text[:200]}")

    def ready(self) -> bool:
        model = self.hub_api("GET", f"users/{self.name}").json()
        return bool(model.get("servers", {}).get("", {}).get("ready"))

    def put_script(self) -> None:
        answer = self.session.put(
            self.hub.url + f"user/{self.name}/api/contents/scale-job.py",
            json={"type": "file", "format": "text", "content": "print('ok')\n"},
            timeout=60,
        )
        if answer.status_code not in (200, 201):
            raise RuntimeError(f"{self.name}'s script: {answer.status_code} {answer.text[:200]}")

    def warm_up(self) -> tuple[float, float, str]:
        """Submit one job and await its end (the server's first submit imports what
        submitting needs, the first job starts the user's warm pool: once per user):
        ``(submit seconds, seconds to its end, final state)``."""
        start = time.perf_counter()
        job = self.rest("warm-up", "POST", "jobs", json={"path": "scale-job.py", "workers": 1})
        if job is None:
            return 0.0, 0.0, "not submitted: " + "; ".join(self.errors[-1:])
        submitted = time.perf_counter() - start
        deadline = time.monotonic() + 300
        while job is not None and job["state"] not in TERMINAL and time.monotonic() < deadline:
            time.sleep(0.5)
            job = self.rest("warm-up", "GET", f"jobs/{job['id']}")
        return submitted, time.perf_counter() - start, job["state"] if job else "REST error"

    def rest(self, kind: str, method: str, path: str, **kw: Any) -> Any:
        """One call of the user's server's REST API, timed; None on an error."""
        url = self.hub.url + f"user/{self.name}/{API}/{path}"
        start = time.perf_counter()
        try:
            answer = self.session.request(method, url, timeout=60, allow_redirects=False, **kw)
        except requests.RequestException as e:
            with self.lock:
                self.errors.append(f"{kind}: {type(e).__name__}")
            return None
        took = time.perf_counter() - start
        with self.lock:
            if 200 <= answer.status_code < 300:
                self.times.append((kind, took))
            else:
                self.errors.append(f"{kind}: {answer.status_code} {answer.text[:120]}")
                return None
        return answer.json()

    def act(self, until: float, offset: float) -> None:
        """Be an open panel until ``until``: poll, submit every SUBMIT_EVERY_S, follow
        the submitted job as its view does."""
        next_submit = time.monotonic() + offset
        open_job: dict[str, Any] | None = None  # id, metrics cursor, log cursor, final
        while time.monotonic() < until:
            tick = time.monotonic()
            self.rest("list", "GET", "jobs?state=")
            self.rest("pool", "GET", "pool")
            if open_job is not None:
                jid = open_job["id"]
                job = self.rest("job", "GET", f"jobs/{jid}")
                chunk = self.rest("metrics", "GET", f"jobs/{jid}/metrics?since={open_job['m']}")
                if chunk:
                    open_job["m"] = chunk["cursor"]
                logs = self.rest("logs", "GET", f"jobs/{jid}/logs?rank=0&since={open_job['l']}")
                if logs:
                    open_job["l"] = logs["cursor"]
                if job and job["state"] in TERMINAL:
                    open_job = None if open_job["final"] else {**open_job, "final": True}
            if tick >= next_submit:
                next_submit += SUBMIT_EVERY_S
                job = self.rest(
                    "submit", "POST", "jobs", json={"path": "scale-job.py", "workers": 1}
                )
                if job:
                    self.jobs.append(job["id"])
                    open_job = {"id": job["id"], "m": "", "l": 0, "final": False}
            time.sleep(max(0.0, tick + POLL_S - time.monotonic()))


def _settle(users: list[User], timeout: float) -> tuple[dict[str, int], list[str]]:
    """Wait for every submitted job to end: ``(count per final state, problems)``."""
    states: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    pending = [(u, j) for u in users for j in u.jobs]
    while pending and time.monotonic() < deadline:
        left = []
        for user, jid in pending:
            answer = user.session.get(
                user.hub.url + f"user/{user.name}/{API}/jobs/{jid}", timeout=60
            )
            state = answer.json().get("state") if answer.status_code == 200 else None
            states[jid] = state or f"HTTP {answer.status_code}"
            if state not in TERMINAL:
                left.append((user, jid))
        pending = left
        if pending:
            time.sleep(2)
    counts: dict[str, int] = {}
    problems = []
    for user, jid in ((u, j) for u in users for j in u.jobs):
        counts[states.get(jid, "?")] = counts.get(states.get(jid, "?"), 0) + 1
        if states.get(jid) != "succeeded":
            answer = user.session.get(
                user.hub.url + f"user/{user.name}/{API}/jobs/{jid}", timeout=60
            )
            reason = answer.json().get("reason") if answer.status_code == 200 else answer.text[:120]
            problems.append(f"{user.name} {jid}: {states.get(jid)} ({reason})")
    return counts, problems


def _spawn_all(users: list[User], at_once: int) -> tuple[float, list[tuple[float, float, str]]]:
    """Start every user's server, ``at_once`` at a time, and warm it up: the seconds
    it took, and each user's :meth:`User.warm_up`."""
    start = time.perf_counter()

    def one(user: User) -> tuple[float, float, str]:
        user.spawn()
        _wait(f"{user.name}'s server", user.ready, timeout=300)
        user.put_script()
        return user.warm_up()

    with concurrent.futures.ThreadPoolExecutor(at_once) as pool:
        warm = list(pool.map(one, users))
    return time.perf_counter() - start, warm


def run(smoke: bool) -> list[Series]:
    if smoke:
        counts, durations = [1, 2], {1: 8.0, 2: 12.0}
    else:
        top = int(os.environ.get("ALCHEMIST_SCALE_USERS", "20"))
        minutes = float(os.environ.get("ALCHEMIST_SCALE_USERS_MIN", "5"))
        counts = sorted({1, min(5, top), top})
        durations = {n: 60.0 for n in counts} | {top: minutes * 60}
    target = "0 errors; every job succeeded; hub, proxy, queue hold"
    s_all = Series("users at once: REST p95 (every request)", "users", target=target)
    s_poll = Series("users at once: panel poll GET /jobs p95", "users", target=target)
    s_submit = Series("users at once: POST /jobs p95", "users", target=target)
    s_err = Series("users at once: REST errors", "users", target="0", value_unit="errors")
    with embedded_hub() as hub:
        people = []
        for k in range(max(counts)):
            name, password = f"su{k:02d}-{secrets.token_hex(2)}", secrets.token_urlsafe(12) + "x9Q"
            hub.add_user(name, password)
            people.append(User(hub, name, password))
        spawn_s, warm = _spawn_all(people, at_once=4)
        warm_failed = [
            f"{u.name}: {w[2]}" for u, w in zip(people, warm, strict=True) if w[2] != "succeeded"
        ]
        all_ok = not warm_failed
        for n in counts:
            active = people[:n]
            for user in active:
                user.times, user.errors, user.jobs = [], [], []
            until = time.monotonic() + durations[n]
            threads = [
                threading.Thread(
                    target=u.act,
                    args=(until, random.uniform(0, min(SUBMIT_EVERY_S, durations[n] / 2))),
                )
                for u in active
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            outcome, problems = _settle(active, timeout=300)
            times = [t for u in active for _, t in u.times]
            errors = [e for u in active for e in u.errors]
            submitted = sum(len(u.jobs) for u in active)
            s_all.add(n, pct(times, 95) if times else float("nan"))
            s_poll.add(n, pct([t for u in active for k, t in u.times if k == "list"] or [0.0], 95))
            s_submit.add(
                n, pct([t for u in active for k, t in u.times if k == "submit"] or [0.0], 95)
            )
            s_err.add(n, len(errors))
            tickets = [p.name for p in hub.admission.iterdir() if p.name != ".lock"]
            hub_ok = hub.proc.poll() is None and requests.get(hub.url + "hub/api/", timeout=30).ok
            ok = not errors and not problems and not tickets and hub_ok and submitted > 0
            all_ok &= ok
            s_all.notes.append(
                f"{n} users for {durations[n]:.0f} s: {len(times) + len(errors)} requests"
                f" ({len(errors)} errors), {submitted} jobs submitted, final states"
                f" {outcome}; queue tickets left {len(tickets)}; hub and proxy answering:"
                f" {hub_ok}"
            )
            s_all.notes.extend(f"  {e}" for e in (errors[:5] + problems[:5]))
        s_all.notes.append(
            f"{len(people)} users' servers started and warmed up in {spawn_s:.0f} s (4 at a"
            f" time), up throughout; each user polls every {POLL_S:.0f} s and submits every"
            f" {SUBMIT_EVERY_S:.0f} s; {os.cpu_count()} CPU cores"
        )
        s_all.notes.append(
            "warm-up (each server's first submit, not in the figures): POST /jobs p50"
            f" {pct([w[0] for w in warm], 50):.2f} s, max {max(w[0] for w in warm):.2f} s;"
            f" to its end (starts the user's warm pool) p50 {pct([w[1] for w in warm], 50):.1f} s,"
            f" max {max(w[1] for w in warm):.1f} s; not succeeded: {warm_failed or 'none'}"
        )
    for series in (s_all, s_poll, s_submit, s_err):
        series.met = all_ok
    return [s_all, s_poll, s_submit, s_err]
