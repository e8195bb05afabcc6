"""Isolation on the embedded hub: user B cannot list, read or cancel user A's job.

Everything is real: the hub (run as root, so each hub user has a system account made by
the hub), both users' JupyterLab servers with the Alchemist REST API, and a running job
of A's on the local backend. B tries every interface from B's own account: the Python
API, the CLI, the magics (in a real IPython shell), the REST API of B's own server and
of A's server, and, going around Alchemist, A's files and processes directly.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.hubproc import RunningHub, wait_until

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="isolation needs a hub run as root (one system account per user);"
    " a single-account hub does not isolate users (docs/hub.md)",
)

API = "alchemist/api/v1"

# Run as A: submit a job that runs until cancelled, and check A sees it (the control).
SUBMIT_AS_A = textwrap.dedent(
    """
    import json, alchemist
    job = alchemist.submit(
        "import time\\nprint('A-private-output', flush=True)\\ntime.sleep(600)\\n",
        workers=1, name="a-private",
    )
    assert alchemist.attach(job.id).owner == job.owner
    print(json.dumps({"id": job.id, "log": str(job.job_dir.rank_log(0)),
                      "dir": str(job.job_dir.root)}))
    """
)

# Run as B: every way B could reach A's job; prints what each attempt got.
PROBE_AS_B = textwrap.dedent(
    """
    import contextlib, io, json, os, sys
    import alchemist
    from alchemist import cli
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell

    a_id, a_home, a_dir, a_log, a_pid, mode = sys.argv[1:7]
    cancel = mode == "try-cancel"  # the control run (as A) must not cancel the job
    out = {}

    def attempt(name, fn):
        try:
            fn()
            out[name] = "ok"
        except Exception as e:
            out[name] = f"{type(e).__name__}: {e}"

    # Python API
    out["api_jobs"] = [j.id for j in alchemist.jobs()]
    attempt("api_attach", lambda: alchemist.attach(a_id))

    # CLI (the console script's main, as `alchemist ARGS` runs it)
    for args in (["jobs", "--json"], ["status", a_id], ["logs", a_id], ["cancel", a_id]):
        if args[0] == "cancel" and not cancel:
            continue
        o, e = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
            code = cli.main(args)
        out["cli_" + args[0]] = {"code": code, "stdout": o.getvalue(), "stderr": e.getvalue()}

    # Magics in a real IPython shell
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "alchemist")
    for magic, arg in (("alchemist_jobs", ""), ("alchemist_attach", a_id),
                       ("alchemist_logs", a_id), ("alchemist_cancel", a_id)):
        # In the control run, attach (which watches a running job to its end) and
        # cancel are left out.
        if magic in ("alchemist_attach", "alchemist_cancel") and not cancel:
            continue
        o = io.StringIO()
        try:
            with contextlib.redirect_stdout(o):
                shell.run_line_magic(magic, arg)
            out[magic] = {"ok": o.getvalue()}
        except UsageError as e:
            out[magic] = {"error": str(e)}

    # Around Alchemist: A's files and processes
    attempt("os_list_home", lambda: os.listdir(a_home))
    attempt("os_list_jobdir", lambda: os.listdir(a_dir))
    attempt("os_read_log", lambda: open(a_log).read())
    attempt("os_signal_launcher", lambda: os.kill(int(a_pid), 0))

    # The Python API pointed at A's store
    os.environ["ALCHEMIST_HOME"] = os.path.join(a_home, ".alchemist")
    attempt("api_attach_with_a_home", lambda: alchemist.attach(a_id).logs())
    print(json.dumps(out))
    """
)


def run_as(user: str, script: str, *args: str) -> str:
    """Run ``python -c script`` as ``user``'s system account, in their environment."""
    entry = pwd.getpwnam(user)
    env = {
        "HOME": entry.pw_dir,
        "USER": user,
        "LOGNAME": user,
        "JUPYTERHUB_USER": user,
        "ALCHEMIST_HOME": str(Path(entry.pw_dir) / ".alchemist"),
        "PATH": f"{Path(sys.executable).parent}:{os.defpath}",
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        user=entry.pw_uid,
        group=entry.pw_gid,
        extra_groups=[],
        env=env,
        cwd=entry.pw_dir,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


class HubUser:
    """A hub user with an API token, talking to the hub and to their server."""

    def __init__(self, hub: RunningHub, name: str, password: str) -> None:
        self.hub, self.name = hub, name
        session = requests.Session()
        session.get(hub.url + "hub/login", timeout=30)
        answer = session.post(
            hub.url + "hub/login",
            data={"username": name, "password": password, "_xsrf": session.cookies["_xsrf"]},
            allow_redirects=False,
            timeout=30,
        )
        assert answer.status_code == 302, answer.text
        made = session.post(
            hub.url + f"hub/api/users/{name}/tokens",
            json={"note": "isolation test"},
            headers={"X-XSRFToken": session.cookies["_xsrf"]},
            timeout=30,
        )
        assert made.status_code == 201, made.text
        self.headers = {"Authorization": f"token {made.json()['token']}"}

    def hub_api(self, method: str, path: str) -> requests.Response:
        return requests.request(
            method, self.hub.url + "hub/api/" + path, headers=self.headers, timeout=30
        )

    def spawn(self) -> None:
        assert self.hub_api("POST", f"users/{self.name}/server").status_code in (201, 202)

        def ready() -> bool:
            model = self.hub_api("GET", f"users/{self.name}").json()
            return bool(model.get("servers", {}).get("", {}).get("ready"))

        wait_until(f"{self.name}'s server", ready, timeout=180, interval=0.5)

    def rest(self, method: str, owner: str, path: str) -> requests.Response:
        """Call the Alchemist REST API of ``owner``'s server with this user's token."""
        return requests.request(
            method,
            self.hub.url + f"user/{owner}/{API}/{path}",
            headers=self.headers,
            allow_redirects=False,
            timeout=60,
        )


def launcher_pid(job_dir: Path) -> int:
    return int((job_dir / "pids" / "launcher.pid").read_text().strip())


def test_user_b_cannot_see_read_or_cancel_user_a_job(hub: RunningHub) -> None:
    # Fresh names: system accounts of these names are made (and removed) by the test.
    a, b = f"alice-{uuid.uuid4().hex[:6]}", f"bob-{uuid.uuid4().hex[:6]}"
    hub.add_user(a, "alice-Passw0rd-1")
    hub.add_user(b, "bob-Passw0rd-1")
    alice = HubUser(hub, a, "alice-Passw0rd-1")
    bob = HubUser(hub, b, "bob-Passw0rd-1")
    alice.spawn()  # the hub makes alice's and bob's system accounts on first spawn
    bob.spawn()

    job: dict[str, Any] = json.loads(run_as(a, SUBMIT_AS_A))
    a_id, a_log, a_dir = job["id"], Path(job["log"]), Path(job["dir"])
    a_home = Path(pwd.getpwnam(a).pw_dir)
    wait_until(
        "alice's job to run",
        lambda: a_log.exists() and "A-private-output" in a_log.read_text(),
        timeout=120,
    )
    try:
        # Control: alice sees her running job through her server's REST API.
        mine = alice.rest("GET", a, f"jobs/{a_id}")
        assert mine.status_code == 200, mine.text
        assert mine.json()["state"] == "running"
        assert a_id in [j["id"] for j in alice.rest("GET", a, "jobs").json()["jobs"]]

        probe_args = (a_id, str(a_home), str(a_dir), str(a_log), str(launcher_pid(a_dir)))
        # Control: the same probe run as A reaches the job, so the probe can tell.
        control = json.loads(run_as(a, PROBE_AS_B, *probe_args, "read-only"))
        assert a_id in control["api_jobs"]
        assert control["api_attach"] == "ok"
        assert "A-private-output" in control["cli_logs"]["stdout"]
        assert "A-private-output" in control["alchemist_logs"]["ok"]
        assert control["os_read_log"] == control["os_signal_launcher"] == "ok"

        probe = json.loads(run_as(b, PROBE_AS_B, *probe_args, "try-cancel"))
        # Python API: not listed, not attachable.
        assert a_id not in probe["api_jobs"]
        assert probe["api_attach"].startswith("JobNotFoundError")
        # CLI: not listed; status, logs and cancel fail with one line, exit non-zero.
        assert a_id not in probe["cli_jobs"]["stdout"]
        for cmd in ("status", "logs", "cancel"):
            result = probe[f"cli_{cmd}"]
            assert result["code"] != 0, (cmd, result)
            assert a_id in result["stderr"] and result["stderr"].count("\n") == 1, result
            assert "A-private-output" not in result["stdout"] + result["stderr"]
        # Magics: not listed; attach, logs and cancel are one UsageError line.
        assert a_id not in probe["alchemist_jobs"].get("ok", "")
        for magic in ("alchemist_attach", "alchemist_logs", "alchemist_cancel"):
            assert "error" in probe[magic] and a_id in probe[magic]["error"], probe[magic]
        # Around Alchemist: the OS refuses B A's home, job files and processes.
        for attempt in ("os_list_home", "os_list_jobdir", "os_read_log", "os_signal_launcher"):
            assert probe[attempt].startswith("PermissionError"), (attempt, probe[attempt])
        assert probe["api_attach_with_a_home"] != "ok"

        # REST: A's server refuses B's token outright ...
        for method, path in (
            ("GET", "jobs"),
            ("GET", f"jobs/{a_id}"),
            ("GET", f"jobs/{a_id}/logs?rank=0"),
            ("DELETE", f"jobs/{a_id}"),
        ):
            answer = bob.rest(method, a, path)
            assert answer.status_code in (403, 404), (method, path, answer.status_code)
            assert "A-private-output" not in answer.text
        # ... and B's own server does not know the job.
        assert a_id not in [j["id"] for j in bob.rest("GET", b, "jobs").json()["jobs"]]
        for method, path in (
            ("GET", f"jobs/{a_id}"),
            ("GET", f"jobs/{a_id}/logs?rank=0"),
            ("DELETE", f"jobs/{a_id}"),
        ):
            assert bob.rest(method, b, path).status_code == 404, (method, path)

        # After all that, A's job is still running, untouched.
        assert alice.rest("GET", a, f"jobs/{a_id}").json()["state"] == "running"
    finally:
        # A may cancel her own job; it ends, leaving no process behind.
        alice.rest("DELETE", a, f"jobs/{a_id}")
        wait_until(
            "alice's job to end",
            lambda: alice.rest("GET", a, f"jobs/{a_id}").json()["state"] == "cancelled",
            timeout=60,
        )


def _uid_processes(uid: int) -> list[int]:
    import psutil

    return [
        p.pid
        for p in psutil.process_iter(["uids"])
        if p.info["uids"] and p.info["uids"].real == uid
    ]


def test_a_deleted_users_name_cannot_be_taken_with_their_account_files_and_jobs(
    hub: RunningHub,
) -> None:
    """An admin deletes carol, whose job is running. Her account's processes end (the
    server, the job), the account is locked and kept, and whoever signs up or is added
    as carol later is refused: they would spawn as her old account, with her files and
    jobs. ``alchemist-hub release-name`` deletes the old account; a new carol then
    starts from an empty home."""
    from alchemist.hub.embedded.settings import RETIRED_MARKER

    c, password = f"carol-{uuid.uuid4().hex[:6]}", "carol-Passw0rd-1"
    hub.add_user(c, password)
    carol = HubUser(hub, c, password)
    carol.spawn()
    job: dict[str, Any] = json.loads(run_as(c, SUBMIT_AS_A))
    log = Path(job["log"])
    wait_until("carol's job to run", lambda: log.exists() and "A-private" in log.read_text(), 120)
    entry = pwd.getpwnam(c)
    # Code a root hub would run, owned by a hub user: refused at the hub's start
    # (alchemist-hub start checks its code with this).
    from alchemist.hub.embedded.accounts import changeable_by_others

    planted = hub.hub_dir.parent / f"planted-{c}.py"
    planted.write_text("")
    os.chown(planted, entry.pw_uid, entry.pw_gid)
    assert changeable_by_others([planted], []) == [f"{planted} belongs to hub user {c}"]

    admin = HubUser(hub, hub.admin, hub.admin_password)
    deleted = admin.hub_api("DELETE", f"users/{c}")
    assert deleted.status_code == 204, deleted.text
    wait_until("carol's processes to end", lambda: not _uid_processes(entry.pw_uid), 60)
    retired = pwd.getpwnam(c)
    assert retired.pw_gecos.startswith(RETIRED_MARKER) and retired.pw_uid == entry.pw_uid
    assert Path(job["dir"]).is_dir()  # her files are kept, for an administrator
    assert changeable_by_others([planted], []) == [f"{planted} belongs to hub user {c}"]
    planted.unlink()

    # Taking the name: refused, by the admin's command and by the sign-up page.
    again = hub.manage("add-user", c, "--password-stdin", stdin=password + "\n")
    assert again.returncode == 2 and "belonged to a deleted hub user" in again.stderr, again
    assert f"alchemist-hub release-name {c}" in again.stderr and again.stderr.count("\n") == 1
    session = requests.Session()
    session.get(hub.url + "hub/signup", timeout=30)
    session.post(
        hub.url + "hub/signup",
        data={"username": c, "signup_password": "new-Passw0rd-9",
              "signup_password_confirmation": "new-Passw0rd-9",
              "_xsrf": session.cookies["_xsrf"]},
        timeout=30,
    )  # fmt: skip
    import sqlite3

    with sqlite3.connect(hub.hub_dir / "jupyterhub.sqlite") as db:  # no sign-up was kept
        signed = db.execute("select username from users_info where username = ?", (c,))
        assert signed.fetchall() == []

    released = hub.manage("release-name", c)
    assert released.returncode == 0, released.stderr
    try:
        pwd.getpwnam(c)
        raise AssertionError("the retired account is still there")
    except KeyError:
        pass
    hub.add_user(c, password)  # a new carol
    HubUser(hub, c, password).spawn()
    assert pwd.getpwnam(c).pw_uid is not None
    assert not (Path(pwd.getpwnam(c).pw_dir) / ".alchemist" / "jobs" / job["id"]).exists()
