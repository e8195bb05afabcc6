"""The REST API's OpenAPI document, checked against the handlers, and a property-based
fuzz of every route from that document (schemathesis) against a real Jupyter server
with the extension: no request, however malformed, gets a 5xx.

The server is a real ``jupyter server`` process with its own ``ALCHEMIST_HOME``; its
root holds the awkward files that once gave HTTP 500 (a notebook whose JSON is a list,
one whose cells are a string, a binary ``.py``), and its store two jobs that did: one
whose metrics file holds malformed lines and a NaN loss, one stored by an earlier
version with an infinite timeout. The fuzz's explicit examples (added to its copy of
the document, not to the one the server serves) aim at them: huge and past-the-end
cursors, the summary view, submissions with non-finite and absurd numbers. Every JSON
reply must be strict JSON (no bare ``NaN`` or ``Infinity``, which the panel's
``JSON.parse`` refuses).
"""

from __future__ import annotations

import copy
import json
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings

from alchemist.server.openapi import document

TOKEN = "fuzz-token"
AUTH = {"Authorization": f"token {TOKEN}"}
USER = "fuzzer"
#: The server's jobs the explicit examples read: malformed metric lines and a NaN loss;
#: a spec stored with an infinite timeout.
METRICS_JOB = "jfuzzmetrics"
FOREVER_JOB = "jfuzzforever"

#: A cursor per name: past any file offset, beyond int()'s digits, past the end of a file.
HUGE_CURSORS = {
    "past_int64": "99999999999999999999999",
    "ten_to_400": str(10**400),
    "digits_5000": "9" * 5000,
    "rank_offset_huge": "0:99999999999999999999999",
    "rank_past_the_end": f"0:{1 << 62}",
}
#: Submissions with numbers that are not finite (1e400 is inf) or absurd.
ABSURD_BODIES = {
    "timeout_inf": {"path": "train.py", "timeout": math.inf},
    "timeout_nan": {"path": "train.py", "timeout": math.nan},
    "timeout_subnormal": {"path": "train.py", "timeout": 1e-320},
    "timeout_huge": {"path": "train.py", "timeout": 1e300},
    "workers_huge": {"path": "train.py", "workers": 10**30},
    "gpus_huge": {"path": "train.py", "gpus_per_worker": 4096},
}


def _examples(values: dict[str, Any]) -> dict[str, Any]:
    return {name: {"value": value} for name, value in values.items()}


def _with_examples(op: dict[str, Any], examples: dict[str, dict[str, Any]]) -> None:
    """Give ``op``'s parameters named examples (``{parameter: {example name: value}}``;
    the examples of one name make one request). The operations share their parameter
    objects: each gets its own copies."""
    op["parameters"] = [
        {**p, "examples": _examples(examples[p["name"]])} if p["name"] in examples else p
        for p in op["parameters"]
    ]


def fuzzed_document() -> dict[str, Any]:
    """The served document plus explicit examples aimed at inputs that gave 500s."""
    doc = copy.deepcopy(document("/"))
    paths = doc["paths"]
    metrics_cursors = {"first_view": "", **HUGE_CURSORS}
    _with_examples(
        paths["/jobs/{job_id}/metrics"]["get"],
        {
            "job_id": dict.fromkeys(metrics_cursors, METRICS_JOB),
            "since": metrics_cursors,
            # the panel's first view of a job is its summary, then it pages events
            "view": {"first_view": "summary", **dict.fromkeys(HUGE_CURSORS, "events")},
        },
    )
    log_cursors = {
        "from_start": 0,
        "past_int64": 99999999999999999999999,
        "ten_to_400": 10**400,
        "past_the_end": 1 << 50,
    }
    logs = paths["/jobs/{job_id}/logs"]["get"]
    _with_examples(logs, {"job_id": dict.fromkeys(log_cursors, METRICS_JOB), "since": log_cursors})
    for p in logs["parameters"]:
        if p["name"] == "since":  # schemathesis drops an example its schema refuses
            p["schema"] = {k: v for k, v in p["schema"].items() if k != "maximum"}
    for path in ("/jobs/{job_id}", "/jobs/{job_id}/dryrun"):
        _with_examples(
            paths[path]["get"], {"job_id": {"metrics": METRICS_JOB, "forever": FOREVER_JOB}}
        )
    # Schemathesis drops a body example its schema refuses: the dry run's copy of the
    # schema has no bounds (a dry run submits nothing, whatever gets through).
    unbounded = copy.deepcopy(doc["components"]["schemas"]["Submit"])
    for prop in unbounded["properties"].values():
        prop.pop("minimum", None)
        prop.pop("maximum", None)
    paths["/jobs/dryrun"]["post"]["requestBody"]["content"] = {
        "application/json": {"schema": unbounded, "examples": _examples(ABSURD_BODIES)}
    }
    return doc


schema = schemathesis.openapi.from_dict(fuzzed_document())


def _record(job_id: str, base: Path, spec: dict[str, Any]) -> None:
    """Record a finished job of the fuzz's user in the store under ``base``/home."""
    from alchemist.job import config
    from alchemist.job.jobdir import JobDir
    from alchemist.store import JobRecord, get_store

    job_dir = JobDir(config.jobs_root() / job_id).create()
    now = time.time()
    get_store().add(
        JobRecord(
            id=job_id,
            owner=USER,
            name=job_id,
            backend="local",
            state="succeeded",
            reason=None,
            created=now,
            started=now + 1,
            finished=now + 5,
            restarts=0,
            spec=spec,
            job_dir=str(job_dir.root),
        )
    )
    if job_id == METRICS_JOB:
        job_dir.metrics_dir.mkdir(parents=True, exist_ok=True)
        job_dir.rank_metrics(0).write_text(
            '{"rank": 0, "step": 0, "time": 1.0, "values": {"loss": 2.0}}\n'
            '{"rank": 0, "step": 1, "time": 2.0, "values": {"loss"\n'  # truncated
            "not json\n"
            '{"rank": "zero", "step": 2, "values": {"loss": 1.0}}\n'
            '{"rank": 0, "step": "two", "values": {"loss": 1.0}}\n'
            '{"rank": 0, "step": 2, "values": {"loss": "low"}}\n'
            '{"rank": 0, "step": 2, "time": 3.0, "values": {"loss": NaN}}\n'
        )
        job_dir.rank_log(0).write_text("hello\n")


def _store_jobs(base: Path) -> None:
    """The two jobs of the explicit examples, in the store the server will open."""
    from alchemist.job.spec import JobSpec

    saved = {k: os.environ.get(k) for k in ("ALCHEMIST_HOME", "ALCHEMIST_DB_URL")}
    os.environ["ALCHEMIST_HOME"] = str(base / "home")
    os.environ.pop("ALCHEMIST_DB_URL", None)
    try:
        spec = JobSpec(name="fuzz", entry="script").validate().to_dict()
        _record(METRICS_JOB, base, spec)
        _record(FOREVER_JOB, base, {**spec, "timeout": math.inf})  # as earlier versions did
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _not_json(word: str) -> Any:
    raise ValueError(f"{word} is not JSON")


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
    _store_jobs(base)
    port = _free_port()
    env = {
        **os.environ,
        "ALCHEMIST_HOME": str(base / "home"),
        "ALCHEMIST_ADMISSION_DIR": str(base / "admission"),
        "JUPYTERHUB_USER": USER,
        "ALCHEMIST_DB_URL": "",
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
        # JSON reads 1e400 as infinity: the job was submitted, and the list broke
        ('{"path": "train.py", "timeout": 1e400}', "timeout"),
        ('{"path": "train.py", "timeout": -1e400}', "timeout"),
        ('{"path": "train.py", "timeout": 1e-320}', "timeout"),
        ('{"path": "train.py", "workers": 100000000000000000000000000000}', "workers"),
        ('{"path": "train.py", "timeout": NaN}', None),  # not JSON at all
        ('{"path": "train.py", "timeout": Infinity}', None),
    ],
)
def test_files_and_values_that_gave_500_are_one_line_400s(
    server: str, body: dict[str, Any] | str, field: str | None
) -> None:
    for route in ("/jobs/dryrun", "/jobs"):
        if isinstance(body, str):  # as written: a JSON library would not write these
            headers = {**AUTH, "Content-Type": "application/json"}
            r = requests.post(server + route, data=body, headers=headers, timeout=60)
        else:
            r = requests.post(server + route, json=body, headers=AUTH, timeout=60)
        assert r.status_code == 400, r.text
        reply = r.json()
        assert len(reply["message"].splitlines()) == 1
        if field:
            assert reply["field"] == field, reply
    # whatever was refused, the list (the panel polls it) is still strict JSON
    r = requests.get(server + "/jobs", headers=AUTH, timeout=60)
    assert r.status_code == 200 and json.loads(r.text, parse_constant=_not_json)


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
    if kind.startswith("application/json") and response.text:
        # strict JSON, as the panel's JSON.parse reads it: no bare NaN or Infinity
        json.loads(response.text, parse_constant=_not_json)
    if response.status_code >= 400 and kind.startswith("application/json"):
        # Our errors are one line; a path outside the API (a job id with a slash)
        # gets the Jupyter server's own 404 page, which is not JSON.
        message = response.json().get("message", "")
        assert message and len(message.splitlines()) == 1, response.text[:500]
