"""The warm pool over REST (``GET``/``DELETE /alchemist/api/v1/pool``), against a real
Jupyter server and a real pool started by a real local job."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from alchemist.backends.local.pool import client as pool_client
from alchemist.backends.local.pool import state
from tests.server.test_handlers import wait_for_state
from tests.support.jobs import Api


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="ap-"))
    monkeypatch.setenv(state.POOL_DIR_VAR, str(folder))
    yield folder
    for pool in folder.iterdir():
        if pool.is_dir():
            pool_client.stop(pool)
    shutil.rmtree(folder, ignore_errors=True)


async def test_the_pool_is_shown_and_stopped_over_rest(api: Api, root: Path, pools: Path) -> None:
    code, none = await api("GET", "pool")
    assert code == 200 and none["running"] is False
    assert none["text"].startswith("warm pool: none")

    (root / "quick.py").write_text("print('hi', flush=True)\n")
    code, job = await api("POST", "jobs", body={"path": "quick.py", "workers": 2})
    assert code == 201, job
    done = await wait_for_state(api, job["id"], {"succeeded", "failed", "cancelled"}, 120)
    assert done["state"] == "succeeded", done

    code, pool = await api("GET", "pool")
    assert code == 200 and pool["running"] is True and pool["status"] == "ready"
    assert pool["served"] == 1 and pool["ranks"] == 0 and pool["jobs"] == []
    assert pool["text"].startswith("warm pool: idle ") and "1 job served" in pool["text"]
    assert 0 < pool["ends_in_s"] <= pool["keepalive_s"]

    code, after = await api("DELETE", "pool")
    assert code == 200 and after["running"] is False
    assert state.read_info(state.pool_dir()) is None
