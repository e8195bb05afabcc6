"""``GET /alchemist/api/v1/jobs/<id>/diagnosis`` and ``.../diagnosis/bundle`` (the debug
bundle) on a real Jupyter server with the extension (pytest-jupyter's server, real HTTP),
for a real job: torchrun, gloo, 2 ranks on the local backend; and for ids that are no
job, or another user's.

Real parts: all of it, except that the other user's job is a row in the real store
with an empty job directory (there is no second Unix user here).
"""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from alchemist.store import get_store
from tests.server.jobs import Api, make_record

CELL = """
import time, torch, torch.distributed as dist
def load_batch():
    time.sleep(600)
print(f"rank {dist.get_rank()} ready", flush=True)
if dist.get_rank() == 1:
    load_batch()
dist.all_reduce(torch.ones(1))
"""


async def test_a_missing_rank_over_rest_and_the_job_goes_on(
    api: Api, root: Path, jp_fetch: Any
) -> None:
    (root / "hang.py").write_text(CELL)
    code, job = await api("POST", "jobs", body={"path": "hang.py", "workers": 2})
    assert code == 201, job
    try:
        deadline = time.monotonic() + 120
        found: dict[str, object] = {}
        # Until rank 1 is in its own code (before, it may be caught still starting up).
        while found.get("classification") != "missing_rank" or "load_batch" not in str(
            found.get("headline")
        ):
            assert time.monotonic() < deadline, found
            code, found = await api("GET", "jobs", job["id"], "diagnosis")
            assert code == 200, found
            await asyncio.sleep(0.2)
        assert str(found["headline"]).startswith(
            "rank 1 has not reached all_reduce; it is in `load_batch` (script line 4)"
        )
        # The debug bundle: a .tar.gz attachment with the report and the ranks' stacks.
        response = await jp_fetch(
            "alchemist", "api", "v1", "jobs", job["id"], "diagnosis", "bundle", method="GET"
        )
        assert response.code == 200
        assert response.headers["Content-Type"] == "application/gzip"
        name = f"alchemist-{job['id']}-debug.tar.gz"
        assert response.headers["Content-Disposition"] == f'attachment; filename="{name}"'
        with tarfile.open(fileobj=io.BytesIO(response.body), mode="r:gz") as tar:
            top = name.removesuffix(".tar.gz")
            report = json.load(tar.extractfile(f"{top}/report.json"))  # type: ignore[arg-type]
            stacks = tar.extractfile(f"{top}/debug/stacks-rank-1.txt").read()  # type: ignore[union-attr]
            assert f"{top}/logs/rank-0.log" in tar.getnames()
        assert report["job_id"] == job["id"] and report["ranks"][1]["liveness"] == "running"
        assert b"in load_batch" in stacks
        code, after = await api("GET", "jobs", job["id"])
        assert (code, after["state"]) == (200, "running")
    finally:
        code, _ = await api("DELETE", "jobs", job["id"])
        assert code == 200


@pytest.mark.parametrize("route", [["diagnosis"], ["diagnosis", "bundle"]])
async def test_no_such_job_is_a_one_line_404(api: Api, route: list[str]) -> None:
    code, body = await api("GET", "jobs", "jnosuchjob", *route)
    assert code == 404
    assert "jnosuchjob" in body["message"] and len(body["message"].splitlines()) == 1


@pytest.mark.parametrize("route", [["diagnosis"], ["diagnosis", "bundle"]])
async def test_another_users_job_is_403_and_left_alone(api: Api, route: list[str]) -> None:
    record, job_dir = make_record(owner="bob", state="running")
    (job_dir.logs / "rank-0.log").write_text("bob's secret\n")
    code, body = await api("GET", "jobs", record.id, *route)
    assert code == 403 and "another user" in body["message"]
    assert "secret" not in json.dumps(body)
    stored = get_store().get(record.id)
    assert stored is not None and stored.state == "running"
