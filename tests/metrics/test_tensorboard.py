"""TensorBoard on a real job: real event files, a real server, its HTTP data API.

The JupyterHub path is checked through a real Jupyter server with jupyter-server-proxy,
started under the base URL a hub gives a user (``/user/alice/``); the hub itself is not
started here (the browser tests and the hub tests cover it).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from alchemist import tensorboard
from alchemist.tensorboard import find_tensorboard, open_tensorboard, stop_tensorboard


def get_json(url: str, headers: dict[str, str] | None = None) -> Any:
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def on_socket(sock: str) -> Callable[[str], Any]:
    """``fetch(path)``: the JSON TensorBoard answers at ``path`` on its unix socket."""

    def fetch(path: str) -> Any:
        status, body = tensorboard.get(sock, "/" + path)
        if status != 200:
            raise urllib.error.HTTPError(path, status, "not loaded", None, None)  # type: ignore[arg-type]
        return json.loads(body)

    return fetch


def over_http(base: str, headers: dict[str, str]) -> Callable[[str], Any]:
    return lambda path: get_json(base + path, headers)


def scalars(fetch: Callable[[str], Any], run: str, tag: str, expect: int) -> list:
    """Poll the scalars endpoint until ``expect`` points are served (TensorBoard loads lazily)."""
    q = urllib.parse.urlencode({"run": run, "tag": tag})
    deadline = time.monotonic() + 60
    points: list = []
    while time.monotonic() < deadline:
        try:
            points = fetch(f"data/plugin/scalars/scalars?{q}")
        except urllib.error.HTTPError:  # the run is not loaded yet
            points = []
        if len(points) >= expect:
            return points
        time.sleep(0.5)
    return points


def test_tensorboard_serves_the_jobs_scalars(
    finished_job: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JUPYTERHUB_SERVICE_PREFIX", raising=False)
    monkeypatch.delenv("ALCHEMIST_TENSORBOARD_URL", raising=False)
    handle = open_tensorboard(finished_job)
    try:
        assert handle.url == f"/alchemist/tensorboard/{finished_job.id}/"
        fetch = on_socket(handle.socket)
        assert sorted(fetch("data/runs")) == [".", "rank-1"]
        events = finished_job.metrics()
        for run, rank in ((".", 0), ("rank-1", 1)):
            for tag in ("loss", "acc"):
                expected = [
                    (e["step"], e["values"][tag])
                    for e in events
                    if e["rank"] == rank and tag in e["values"]
                ]
                got = scalars(fetch, run, tag, len(expected))
                # [wall_time, step, value]; TensorBoard stores float32.
                assert [p[1] for p in got] == [s for s, _ in expected]
                assert [p[2] for p in got] == pytest.approx([v for _, v in expected], rel=1e-6)
        # Meta values (total_steps, batch_size) are not curves.
        tags = fetch("data/plugin/scalars/tags")
        assert set(tags["."]) == {"loss", "acc"}
        # A second call reuses the server.
        again = open_tensorboard(finished_job)
        assert (again.pid, again.socket) == (handle.pid, handle.socket)
    finally:
        assert stop_tensorboard(finished_job)
    assert (
        not psutil.pid_exists(handle.pid)
        or psutil.Process(handle.pid).status() == psutil.STATUS_ZOMBIE
    )
    assert find_tensorboard(finished_job) is None


def test_an_idle_tensorboard_ends_by_itself_and_the_next_open_starts_another(
    finished_job: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tensorboard.IDLE_VAR, "0.02")  # 1.2 s without a request
    first = open_tensorboard(finished_job)
    try:
        psutil.Process(first.pid).wait(30)
    except psutil.TimeoutExpired:
        stop_tensorboard(finished_job)
        pytest.fail("an idle TensorBoard did not end by itself")
    assert find_tensorboard(finished_job) is None
    assert not Path(first.socket).exists()
    monkeypatch.setenv(tensorboard.IDLE_VAR, "60")
    second = open_tensorboard(finished_job)
    try:
        assert second.pid != first.pid
        assert sorted(on_socket(second.socket)("data/runs")) == [".", "rank-1"]
    finally:
        assert stop_tensorboard(finished_job)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_tensorboard_url_through_jupyter_server_proxy(
    finished_job: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind JupyterHub the URL is the user's server's TensorBoard route, and it answers
    there (a real Jupyter server with the Alchemist extension, as installed)."""
    prefix = "/user/alice/"
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", prefix)
    monkeypatch.delenv("ALCHEMIST_TENSORBOARD_URL", raising=False)
    port = _free_port()
    token = "alchemist-test-token"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTERHUB")}
    server = subprocess.Popen(
        [
            sys.executable, "-m", "jupyter_server",
            f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.base_url={prefix}", f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={tmp_path}", "--no-browser", "--allow-root",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )  # fmt: skip
    handle = None
    try:
        handle = open_tensorboard(finished_job)
        assert handle.url == f"{prefix}alchemist/tensorboard/{finished_job.id}/"
        headers = {"Authorization": f"token {token}"}
        base = f"http://127.0.0.1:{port}{handle.url}"
        deadline = time.monotonic() + 60
        runs = None
        while time.monotonic() < deadline:
            try:
                runs = get_json(base + "data/runs", headers)
                break
            except OSError:
                time.sleep(0.5)
        assert runs is not None and sorted(runs) == [".", "rank-1"]
        got = scalars(over_http(base, headers), ".", "loss", 40)
        assert [p[1] for p in got] == list(range(40))
    finally:
        if handle is not None:
            stop_tensorboard(finished_job)
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
