"""A session's engines forked from the user's warm pool (real daemon, zygote, engines).

Each engine is a fresh process forked from the pool's zygote (torch and ipyparallel
already imported); its process group meets on the pool's store under the session's own
prefix, so two sessions served by one pool at once never pair their collectives.
``no_warm`` starts the engines cold, as new Python processes under the supervisor.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import psutil
import pytest

from tests.interactive.conftest import ALL_REDUCE

OTHER_SESSION = """
import alchemist
s = alchemist.session(3)
s.run({cell!r})
s.stop()
"""


def _parents(s: Any) -> set[str]:
    """What started the session's engines: the module each one's parent runs."""
    out = set()
    for r in s.ranks:
        pid = int((s.job_dir.rank_pid(r)).read_text())
        parent = psutil.Process(pid).parent()
        assert parent is not None
        out.add(" ".join(parent.cmdline()[1:3]))
    return out


def test_engines_come_from_the_warm_pool_and_two_sessions_share_it_safely(
    started: Any, capsys: Any
) -> None:
    s = started(2)
    log = s.job_dir.launcher_log.read_text()
    assert "warm start: 2 ranks forked from the warm pool" in log, log[-2000:]
    assert _parents(s) == {"-m alchemist.backends.local.pool.zygote"}
    # a second session (another kernel: a process of its own) served by the same pool
    # while this one runs: each all_reduce sums its own world only
    other = subprocess.run(
        [sys.executable, "-c", OTHER_SESSION.format(cell=ALL_REDUCE)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert other.returncode == 0, other.stderr[-3000:]
    assert sorted(line for line in other.stdout.splitlines() if "sum=" in line) == [
        f"[rank {r}] rank={r} sum=6" for r in range(3)
    ]
    s.run(ALL_REDUCE)
    out = capsys.readouterr().out
    assert "[rank 0] rank=0 sum=3" in out and "[rank 1] rank=1 sum=3" in out


def test_no_warm_starts_the_engines_as_new_processes(started: Any, capsys: Any) -> None:
    s = started(2, no_warm=True)
    assert "warm start" not in s.job_dir.launcher_log.read_text()
    assert _parents(s) == {"-m alchemist.backends.local.supervisor"}
    s.run(ALL_REDUCE)
    assert "[rank 1] rank=1 sum=3" in capsys.readouterr().out


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_cells_run_in_the_notebook_s_folder(
    started: Any, tmp_path: Any, monkeypatch: Any, warm: bool
) -> None:
    """Relative paths and the folder's modules work on the ranks as in the notebook (a
    warm engine once ran in the pool's folder: ipyparallel's default working folder is
    the one it was imported in, the zygote's)."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "data.txt").write_text("42")
    (folder / "helpers.py").write_text("def answer():\n    return 42\n")
    monkeypatch.chdir(folder)
    s = started(2, no_warm=not warm)
    assert ("warm start" in s.job_dir.launcher_log.read_text()) == warm
    s.run(
        "import os, helpers\nhere = os.getcwd()\n"
        "value = int(open('data.txt').read())\nanswer = helpers.answer()"
    )
    assert s.pull("here", rank=1) == str(folder)
    assert s.pull("value", rank=0) == 42 and s.pull("answer", rank=1) == 42


def test_stopping_the_session_that_started_the_pool_leaves_the_pool_up(
    started: Any, monkeypatch: Any, tmp_path: Any
) -> None:
    """The session whose supervisor started the warm pool (the daemon is that process's
    child until it ends) stops without taking the pool with it: the next session's
    engines are forked at once instead of waiting for a new pool."""
    import tempfile
    from pathlib import Path

    from alchemist.backends.local.pool import client as pool_client
    from alchemist.backends.local.pool import state

    folder = Path(tempfile.mkdtemp(prefix="ap-"))  # a pool of this test's own
    monkeypatch.setenv(state.POOL_DIR_VAR, str(folder))
    try:
        first = started(2)
        assert "warm start" in first.job_dir.launcher_log.read_text()
        daemon = state.read_info(state.pool_dir())
        assert daemon is not None
        first.stop()
        info = state.read_info(state.pool_dir())
        assert info is not None and info.pid == daemon.pid and info.status == "ready"
        assert psutil.pid_exists(daemon.pid)
        second = started(2)
        assert "warm start" in second.job_dir.launcher_log.read_text()
        assert state.read_info(state.pool_dir()).pid == daemon.pid  # type: ignore[union-attr]
    finally:
        for pool in folder.iterdir():
            if pool.is_dir():
                pool_client.stop(pool)
