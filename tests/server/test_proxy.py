"""What this Jupyter server forwards: a job's TensorBoard to its owner only, and
``proxy/<port>`` only to this account's own listeners.

Real: the Jupyter server with the Alchemist extension and jupyter-server-proxy (as
installed), a real TensorBoard on the job's event files, and, when the tests run as
root, another account (``nobody``) listening on a loopback port, standing for another
user of the machine. The hub is not started (the server's user is the hub's
single-user server's; the hub tests cover the rest).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from alchemist import tensorboard
from alchemist.client import attach
from alchemist.server.proxy import loopback_listeners, port_owned_by_me
from tests.support.helpers import NOBODY, as_nobody
from tests.support.jobs import Api, make_record

PAGE = "<html>served by {who}</html>"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listen(port: int, who: str, as_other: bool) -> subprocess.Popen[bytes]:
    """An HTTP server on 127.0.0.1:``port`` answering ``PAGE``."""
    code = (
        "import http.server, sys\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        f"        body = {PAGE.format(who=who)!r}.encode()\n"
        "        self.send_response(200); self.send_header('Content-Length', str(len(body)))\n"
        "        self.end_headers(); self.wfile.write(body)\n"
        "    def log_message(self, *a): pass\n"
        "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n"
    )
    user = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if as_other else {}
    proc = subprocess.Popen([sys.executable, "-c", code, str(port)], **user)  # type: ignore[call-overload]
    deadline = time.monotonic() + 30
    while not loopback_listeners(port):
        assert proc.poll() is None and time.monotonic() < deadline, "the listener did not start"
        time.sleep(0.05)
    return proc


@pytest.fixture
def listeners() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another account needs root")
async def test_a_port_another_account_listens_on_is_not_served_in_this_users_origin(
    jp_fetch: Any,
    jp_http_port: int,
    jp_base_url: str,
    jp_auth_header: dict[str, str],
    listeners: list[subprocess.Popen[bytes]],
) -> None:
    """Another account listens on a loopback port (or takes one a program of the user
    was about to use): ``proxy/<port>/``, ``proxy/localhost:<port>/`` and a
    ``user-redirect`` link to them would serve its page in this user's JupyterLab
    origin. They are refused; the user's own listener is served (the control)."""
    theirs, mine = _free_port(), _free_port()
    listeners.append(_listen(theirs, "another account", as_other=True))
    listeners.append(_listen(mine, "me", as_other=False))
    assert loopback_listeners(theirs) == [NOBODY] and not port_owned_by_me(theirs)

    from tornado.httpclient import AsyncHTTPClient

    async def get(path: str) -> Any:  # the path as a browser sends it (':' unescaped)
        url = f"http://127.0.0.1:{jp_http_port}{jp_base_url}{path}"
        return await AsyncHTTPClient().fetch(url, headers=jp_auth_header, raise_error=False)

    for path in (f"proxy/{theirs}/", f"proxy/localhost:{theirs}/", f"proxy/127.0.0.1:{theirs}/"):
        got = await get(path)
        assert got.code == 403, (path, got.code, got.body[:200])
        assert b"another account" not in got.body
    for path in (f"proxy/{mine}/", f"proxy/localhost:{mine}/"):
        got = await get(path)
        assert got.code == 200 and got.body.decode() == PAGE.format(who="me"), path
    nobody_there = await jp_fetch("proxy", str(_free_port()), "", raise_error=False)
    assert nobody_there.code == 403


@pytest.fixture
def job_with_events() -> Iterator[Any]:
    from torch.utils.tensorboard import SummaryWriter

    record, job_dir = make_record()
    writer = SummaryWriter(str(job_dir.tensorboard))
    for step in range(3):
        writer.add_scalar("loss", 1.0 / (step + 1), step)
    writer.close()
    job = attach(record.id)
    yield job
    tensorboard.stop_tensorboard(job)


async def test_a_jobs_tensorboard_is_reached_through_its_owners_server_only(
    api: Api, jp_fetch: Any, jp_base_url: str, job_with_events: Any
) -> None:
    job = job_with_events
    code, body = await api("POST", "jobs", job.id, "tensorboard")
    assert code == 200, body
    assert body["url"] == f"{jp_base_url}alchemist/tensorboard/{job.id}/"
    runs = await jp_fetch("alchemist", "tensorboard", job.id, "data", "runs")
    assert runs.code == 200 and json.loads(runs.body) == ["."]
    page = await jp_fetch("alchemist", "tensorboard", job.id, "")
    assert page.code == 200 and b"<tb-webapp>" in page.body  # TensorBoard's app page
    script = await jp_fetch("alchemist", "tensorboard", job.id, "index.js")
    assert script.code == 200 and len(script.body) > 10_000  # and what it loads

    # No TCP port: nothing another account could read, take first or forward.
    handle = tensorboard.find_tensorboard(job)
    assert handle is not None and "port" not in body
    server = psutil.Process(handle.pid)
    for proc in (server, *server.children(recursive=True)):
        assert proc.net_connections(kind="inet") == [], proc.cmdline()
    assert (os.stat(handle.socket).st_mode & 0o777) == 0o600
    if os.geteuid() == 0:
        probe = (
            "import socket, sys\ns = socket.socket(socket.AF_UNIX)\n"
            "try:\n    s.connect(sys.argv[1]); print('connected')\n"
            "except OSError as e:\n    print(type(e).__name__)\n"
        )
        denied = as_nobody(sys.executable, "-c", probe, handle.socket)
        assert denied.stdout.strip() == "PermissionError", denied

    # Without the user's login: nothing is forwarded.
    anonymous = await jp_fetch(
        "alchemist", "tensorboard", job.id, "data", "runs",
        headers={"Authorization": ""}, raise_error=False, follow_redirects=False,
    )  # fmt: skip
    assert anonymous.code in (302, 403), anonymous.code
    # A job with no TensorBoard running: one line saying how to open it.
    other, _ = make_record()
    missing = await jp_fetch("alchemist", "tensorboard", other.id, "", raise_error=False)
    assert missing.code == 404 and b"no TensorBoard runs for job" in missing.body
