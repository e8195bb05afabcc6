"""Fixtures of the warm-pool tests: a pool folder of each test's own, stopped after it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from alchemist import client
from alchemist.backends.local.pool import client as pool_client
from alchemist.backends.local.pool import state
from alchemist.job.spec import JobState


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This test's pool folder (short: a unix socket's path has a limit)."""
    folder = Path(tempfile.mkdtemp(prefix="ap-"))
    monkeypatch.setenv(state.POOL_DIR_VAR, str(folder))
    monkeypatch.delenv(state.ENABLE_VAR, raising=False)
    monkeypatch.delenv(state.KEEPALIVE_VAR, raising=False)
    yield folder
    for pool in folder.iterdir():
        if pool.is_dir():
            pool_client.stop(pool)
    shutil.rmtree(folder, ignore_errors=True)


def started(job: client.Job) -> str:
    """``warm`` or ``cold``: how the job's ranks started, as its launcher log says."""
    log = job.job_dir.launcher_log.read_text()
    return "warm" if "[alchemist] warm start:" in log else "cold"


@pytest.fixture
def run(pools: Path) -> Callable[..., client.Job]:
    """``run(code, **options)``: submit a 2-rank local job and wait for its end."""

    def go(code: str, expect: JobState | None = JobState.SUCCEEDED, **options: Any) -> client.Job:
        options.setdefault("workers", 2)
        job = client.submit(code, namespace={}, **options)
        status = job.wait(timeout=180)
        if expect is not None:
            assert status.state == expect, (status, job.logs(), started(job))
        return job

    return go
