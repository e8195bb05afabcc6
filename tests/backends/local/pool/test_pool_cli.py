"""``alchemist pool`` (status, stop) on a real pool started by a real local job."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from alchemist import client
from alchemist.backends.local.pool import state
from alchemist.cli import main


def test_pool_status_and_stop_from_the_command_line(
    run: Callable[..., client.Job], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pool"]) == 0
    assert capsys.readouterr().out.strip() == "warm pool: none (the next local job starts one)"
    run("print('hi')")
    assert main(["pool", "status"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("warm pool: idle ") and line.endswith("1 job served"), line
    assert main(["pool", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["running"] is True and status["served"] == 1
    assert main(["pool", "stop"]) == 0
    assert capsys.readouterr().out.strip() == "warm pool stopped"
    assert state.read_info(state.pool_dir()) is None
    assert main(["pool", "stop"]) == 0
    assert capsys.readouterr().out.strip() == "no warm pool is running"


def test_a_bad_keepalive_is_one_clear_line(
    run: Callable[..., client.Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(state.KEEPALIVE_VAR, "ten")
    job = run("print('hi')")
    log = job.job_dir.launcher_log.read_text()
    assert "cold start: ALCHEMIST_POOL_KEEPALIVE must be a number of minutes, got 'ten'" in log
