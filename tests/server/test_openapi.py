"""The REST API's OpenAPI document, checked against the handlers, and a property-based
fuzz of every route from that document (schemathesis) against a real Jupyter server
with the extension: no request, however malformed, gets a 5xx.

The server is a real ``jupyter server`` process with its own ``ALCHEMIST_HOME``; its
root holds the awkward files that once gave HTTP 500 (a notebook whose JSON is a list,
one whose cells are a string, a binary ``.py``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings

from alchemist.server.openapi import document

TOKEN = "fuzz-token"
AUTH = {"Authorization": f"token {TOKEN}"}
schema = schemathesis.openapi.from_dict(document("/"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("api")
    root = base / "root"
    root.mkdir()
    (root / "train.py").write_text("print('hello')\n")
    (root / "list.ipynb").write_text("[1, 2]")
    (root / "cells.ipynb").write_text(json.dumps({"cells": "print(1)"}))
    (root / "sources.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "source": 3}]}))
    (root / "binary.py").write_bytes(b"\xff\xfe\x00\x01" * 64)
    port = _free_port()
    env = {
        **os.environ,
        "ALCHEMIST_HOME": str(base / "home"),
        "ALCHEMIST_ADMISSION_DIR": str(base / "admission"),
        "JUPYTERHUB_USER": "fuzzer",
    }
    log = open(base / "server.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--ServerApp.token={TOKEN}",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.open_browser=False",
            "--allow-root",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/alchemist/api/v1"
    deadline = time.monotonic() + 90
    while True:
        try:
            if requests.get(url, headers=AUTH, timeout=5).status_code == 200:
                break
        except requests.ConnectionError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((base / "server.log").read_text()[-3000:])
        time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


def test_the_document_names_every_route_the_handlers_serve() -> None:
    from alchemist.server import handlers

    routes: list[tuple[str, type]] = []

    class App:
        settings: ClassVar[dict[str, Any]] = {"base_url": "/"}

        def add_handlers(self, host: str, specs: list[tuple[str, type]]) -> None:
            routes.extend(specs)

    handlers.setup_handlers(App())
    served = {}
    for pattern, cls in routes:
        path = pattern.removeprefix("/alchemist/api/v1").removesuffix("/?")
        path = path.replace(handlers._ID, "{job_id}")
        served[path] = {m for m in ("get", "post", "delete", "put", "patch") if m in vars(cls)}
    documented = {p: set(ops) for p, ops in document("/")["paths"].items()}
    assert documented == served


def test_documented_query_arguments_are_those_the_handlers_accept(server: str) -> None:
    for path, ops in document("/")["paths"].items():
        for method, op in ops.items():
            url = server + path.replace("{job_id}", "jnosuchjob")
            names = [p["name"] for p in op["parameters"] if p["in"] == "query"]
            for name in names:
                r = requests.request(method, url, params={name: "1"}, headers=AUTH, json={})
                assert "unknown query argument" not in r.text, (path, method, name, r.text)
            r = requests.request(method, url, params={"zzz": "1"}, headers=AUTH, json={})
            assert r.status_code == 400 and "unknown query argument" in r.json()["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"path": "list.ipynb"}, None),
        ({"path": "cells.ipynb"}, None),
        ({"path": "sources.ipynb"}, None),
        ({"path": "binary.py"}, None),
        ({"path": "a\x00b.py"}, "path"),
        ({"path": 5}, "path"),
        ({"path": "train.py", "gpus_per_worker": 4}, None),
    ],
)
def test_files_and_values_that_gave_500_are_one_line_400s(
    server: str, body: dict[str, Any], field: str | None
) -> None:
    r = requests.post(server + "/jobs/dryrun", json=body, headers=AUTH, timeout=60)
    assert r.status_code == 400, r.text
    reply = r.json()
    assert len(reply["message"].splitlines()) == 1
    if field:
        assert reply["field"] == field


@schema.parametrize()
@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_request_gets_a_server_error(case: Any, server: str) -> None:
    response = case.call(base_url=server, headers=AUTH, timeout=60)
    assert response.status_code < 500, (case.method, case.formatted_path, response.text[:500])
    kind = (response.headers.get("content-type") or [""])[0]
    if response.status_code >= 400 and kind.startswith("application/json"):
        # Our errors are one line; a path outside the API (a job id with a slash)
        # gets the Jupyter server's own 404 page, which is not JSON.
        message = response.json().get("message", "")
        assert message and len(message.splitlines()) == 1, response.text[:500]
