"""``GET /alchemist/api/v1/jobs/<id>/diagnosis`` on a real Jupyter server with the
extension (pytest-jupyter's server, real HTTP), for a real job: torchrun, gloo, 2 ranks
on the local backend; and for ids that are no job, or another user's.

Real parts: all of it, except that the other user's job is a row in the real store
with an empty job directory (there is no second Unix user here).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

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


async def test_a_missing_rank_over_rest_and_the_job_goes_on(api: Api, root: Path) -> None:
    (root / "hang.py").write_text(CELL)
    code, job = await api("POST", "jobs", body={"path": "hang.py", "workers": 2})
    assert code == 201, job
    try:
        deadline = time.monotonic() + 120
        found: dict[str, object] = {}
        while found.get("classification") != "missing_rank":
            assert time.monotonic() < deadline, found
            code, found = await api("GET", "jobs", job["id"], "diagnosis")
            assert code == 200, found
            await asyncio.sleep(0.2)
        assert str(found["headline"]).startswith(
            "rank 1 has not reached all_reduce; it is in `load_batch` (script line 4)"
        )
        code, after = await api("GET", "jobs", job["id"])
        assert (code, after["state"]) == (200, "running")
    finally:
        code, _ = await api("DELETE", "jobs", job["id"])
        assert code == 200


async def test_no_such_job_is_a_one_line_404(api: Api) -> None:
    code, body = await api("GET", "jobs", "jnosuchjob", "diagnosis")
    assert code == 404
    assert "jnosuchjob" in body["message"] and len(body["message"].splitlines()) == 1


async def test_another_users_job_is_403_and_left_alone(api: Api) -> None:
    record, _ = make_record(owner="bob", state="running")
    code, body = await api("GET", "jobs", record.id, "diagnosis")
    assert code == 403 and "another user" in body["message"]
    stored = get_store().get(record.id)
    assert stored is not None and stored.state == "running"
