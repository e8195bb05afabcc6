"""``GET /alchemist/api/v1/jobs/<id>/diagnosis`` (and ``?partial=1``, the partial report
of a diagnosis in progress) and ``.../diagnosis/bundle`` (the debug bundle) on a real
Jupyter server with the extension (pytest-jupyter's server, real HTTP), for real jobs:
torchrun, gloo, 2 ranks on the local backend; and for ids that are no job, or another
user's.

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

from alchemist.job.jobdir import JobDir
from alchemist.store import get_store
from tests.support.diagnose import SILENT
from tests.support.jobs import Api, make_record

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
            "rank 1 has not reached all_reduce; it is in `load_batch` (hang.py line 4)"
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
            stacks = tar.extractfile(f"{top}/stacks/rank-1.txt").read()  # type: ignore[union-attr]
            assert f"{top}/logs/rank-0.log" in tar.getnames()
        assert report["job_id"] == job["id"] and report["ranks"][1]["liveness"] == "running"
        assert b"in load_batch" in stacks
        code, after = await api("GET", "jobs", job["id"])
        assert (code, after["state"]) == (200, "running")
    finally:
        code, _ = await api("DELETE", "jobs", job["id"])
        assert code == 200


async def partial_report(jp_fetch: Any, job_id: str) -> tuple[int, Any]:
    """``GET .../diagnosis?partial=1``: ``(status, report or None)`` (204 has no body)."""
    response = await jp_fetch(
        "alchemist", "api", "v1", "jobs", job_id, "diagnosis",
        params={"partial": "1"}, method="GET", raise_error=False,
    )  # fmt: skip
    return response.code, json.loads(response.body) if response.body else None


async def until(cond: Any, what: str, timeout: float = 120) -> None:
    """Poll ``cond()`` without blocking the server, which runs in this event loop."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def test_partial_reports_while_a_rank_is_awaited_then_the_report(
    api: Api, root: Path, jp_fetch: Any
) -> None:
    """Rank 1 answers nothing (its code holds the GIL and ignores the stack signal), so
    a diagnosis waits its 3 s for it; meanwhile ``?partial=1`` answers at once with who
    answered and who is awaited, as the panel shows it, and 204 when no diagnosis is in
    progress."""
    (root / "stop.py").write_text(SILENT)
    code, job = await api("POST", "jobs", body={"path": "stop.py", "workers": 2})
    assert code == 201, job
    try:
        job_dir = JobDir(Path(job["job_dir"]))

        def ready(rank: int) -> bool:
            log = job_dir.rank_log(rank)
            return log.exists() and f"rank {rank} ready" in log.read_text(errors="replace")

        await until(lambda: ready(0) and ready(1), "both ranks ready")
        assert await partial_report(jp_fetch, job["id"]) == (204, None)  # none in progress

        final: dict[str, Any] = {}
        seen: list[dict[str, Any]] = []
        for _ in range(4):  # rank 0 may be a moment away from its all_reduce
            full = asyncio.ensure_future(api("GET", "jobs", job["id"], "diagnosis"))
            while not full.done():
                code, partial = await partial_report(jp_fetch, job["id"])
                assert code in (200, 204), (code, partial)
                if partial is not None:
                    seen.append(partial)
                await asyncio.sleep(0.1)
            code, final = full.result()
            assert code == 200, final
            if final["classification"] == "missing_rank":
                break
        assert final["classification"] == "missing_rank" and not final["collecting"], final
        waiting = [p for p in seen if p["waiting_for"] == [1]]
        assert waiting, [p["headline"] for p in seen]
        shown = waiting[-1]
        assert shown["headline"] == "rank 0 answered; waiting for rank 1 (up to 3 s)"
        assert shown["collecting"] and shown["classification"] == "collecting"
        assert shown["ranks"][0]["answered"] and not shown["ranks"][1]["answered"]
        assert "in all_reduce from stop.py line " in shown["ranks"][0]["line"]
        assert all(p["job_id"] == job["id"] and p["collecting"] for p in seen)
        assert await partial_report(jp_fetch, job["id"]) == (204, None)  # done: none again
    finally:
        code, _ = await api("DELETE", "jobs", job["id"])
        assert code == 200


ROUTES = [(["diagnosis"], None), (["diagnosis"], {"partial": "1"}), (["diagnosis", "bundle"], None)]


@pytest.mark.parametrize(("route", "params"), ROUTES)
async def test_no_such_job_is_a_one_line_404(
    api: Api, route: list[str], params: dict[str, str] | None
) -> None:
    code, body = await api("GET", "jobs", "jnosuchjob", *route, params=params)
    assert code == 404
    assert "jnosuchjob" in body["message"] and len(body["message"].splitlines()) == 1


@pytest.mark.parametrize(("route", "params"), ROUTES)
async def test_another_users_job_is_403_and_left_alone(
    api: Api, route: list[str], params: dict[str, str] | None
) -> None:
    record, job_dir = make_record(owner="bob", state="running")
    (job_dir.logs / "rank-0.log").write_text("bob's secret\n")
    code, body = await api("GET", "jobs", record.id, *route, params=params)
    assert code == 403 and "another user" in body["message"]
    assert "secret" not in json.dumps(body)
    stored = get_store().get(record.id)
    assert stored is not None and stored.state == "running"
