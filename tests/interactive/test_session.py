"""A session's ranks: engine id = rank, state kept, collectives, output, interrupt, death.

Real ipyparallel engines (two local processes, gloo) started through Alchemist.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import psutil
import pytest

from tests.interactive.conftest import ALL_REDUCE, ANSI, interrupt_a_loop, wait_for


def test_ranks_state_collectives_output_and_listing(
    started: Any, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from alchemist import client
    from alchemist.backends.local import LocalBackend

    submitted: list[str] = []
    submit = LocalBackend.submit

    def spy(self: Any, req: Any, info: Any = None) -> Any:
        submitted.append(req.spec.entry)
        return submit(self, req, info)

    monkeypatch.setattr(LocalBackend, "submit", spy)
    s = started(2)
    # the one submission path: the session went through Backend.submit, as a job does
    assert submitted == ["session"]
    assert s.pull("__name__", rank=0) == "__main__"
    # engine id = rank: each engine's RANK is its id, and torch agrees
    s.run("import os, torch.distributed as dist\nr = (int(os.environ['RANK']), dist.get_rank())")
    assert s.pull("r", rank=0) == (0, 0) and s.pull("r", rank=1) == (1, 1)
    capsys.readouterr()
    # what a rank displays, then its last expression's value, rank after rank
    s.run("from IPython.display import display\ndisplay('shown')\nr[0] * 10")
    assert capsys.readouterr().out.splitlines() == [
        "[rank 0] 'shown'",
        "[rank 0] Out: 0",
        "[rank 1] 'shown'",
        "[rank 1] Out: 10",
    ]
    s.run(ALL_REDUCE)
    out = capsys.readouterr().out
    assert "[rank 0] rank=0 sum=3" in out and "[rank 1] rank=1 sum=3" in out  # 1 + 2
    # state across cells: t is the reduced tensor from the cell before
    s.run("print('again', t.item())")
    assert sorted(capsys.readouterr().out.splitlines()) == [
        "[rank 0] again 3.0",
        "[rank 1] again 3.0",
    ]
    # each rank's lines in order; the rank filter runs on rank 1 only
    s.run("for i in range(5):\n    print('line', i, flush=True)", targets="1")
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"[rank 1] line {i}" for i in range(5)]
    # --no-stream: rank after rank, each in order
    s.run(
        "import time\nfor i in range(3):\n    print('n', i, flush=True); time.sleep(0.01)",
        stream=False,
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"[rank {r}] n {i}" for r in (0, 1) for i in range(3)]
    # push and pull
    s.push({"w": [1, 2, 3]})
    s.run("w2 = [x * (alchemist.context().rank + 1) for x in w]")
    assert s.pull("w2", rank=1) == [2, 4, 6]
    # the session is a job of kind "session": listed with its state
    listed = {j.id: j for j in client.jobs()}
    assert listed[s.id].to_dict()["kind"] == "session"
    assert listed[s.id].status().state.value == "running"
    assert s.job_dir.rank_log(1).read_text().count("line 4") == 1  # output is in the rank's log
    s.stop()
    assert client.attach(s.id).status().state.value == "succeeded"


def test_a_backend_that_runs_no_sessions_refuses_one_in_a_line(alchemist_home: Any) -> None:
    """The backend says whether it runs sessions (``Backend.runs_sessions``); nothing is
    created for one that does not."""
    from alchemist import client
    from alchemist.backends import register_backend
    from alchemist.interactive import SessionError, session
    from alchemist.testing.fakes import InstantBackend

    register_backend(InstantBackend.name, InstantBackend())
    try:
        with pytest.raises(SessionError, match=r"does not run interactive sessions"):
            session(2, backend=InstantBackend.name)
    finally:
        register_backend(InstantBackend.name, None)
    assert client.jobs() == []


def test_interrupt_reaches_every_rank_and_the_next_cell_runs(started: Any, capsys: Any) -> None:
    from alchemist.interactive import SessionError

    s = started(2)
    interrupt_a_loop(s, capsys)
    from alchemist.interactive import transcript

    (cell,) = transcript.read(s.dirs.transcript)
    assert cell.status == "interrupted"
    assert all(v.startswith("KeyboardInterrupt") for v in cell.ranks.values()), cell.ranks
    s.run(ALL_REDUCE)  # the health check finds the ranks in step; the group still works
    out = capsys.readouterr().out
    assert "[rank 0] rank=0 sum=3" in out and "[rank 1] rank=1 sum=3" in out
    assert "rebuilt" not in out
    with pytest.raises(SessionError, match="unknown target rank"):
        s.run("print(1)", targets=[2])


def test_ranks_out_of_step_get_a_rebuilt_process_group(started: Any, capsys: Any) -> None:
    """A cell that fails on rank 1 after rank 0 made one more collective: the health check
    sees the sequence numbers differ and rebuilds the group; the next all_reduce is right."""
    from alchemist.interactive import CellFailed

    s = started(2, collective_timeout=5)
    with pytest.raises(CellFailed, match="ranks 0, 1"):  # rank 0 timed out waiting
        s.run(
            "import torch, torch.distributed as dist, alchemist\n"
            "if alchemist.context().rank == 1:\n    raise ValueError('boom')\n"
            "x = torch.ones(1)\ndist.all_reduce(x)\n"
        )
    err = ANSI.sub("", capsys.readouterr().err)
    assert "[rank 1] ValueError: boom" in err
    s.run(ALL_REDUCE)
    out = capsys.readouterr().out
    assert "process group was rebuilt" in out
    assert "[rank 0] rank=0 sum=3" in out and "[rank 1] rank=1 sum=3" in out


def test_a_killed_rank_breaks_the_session_and_stops_the_other(started: Any) -> None:
    from alchemist.backends.local.procs import read_pid
    from alchemist.interactive import SessionBroken

    s = started(2)
    pids = [read_pid(s.job_dir.rank_pid(r)) for r in s.ranks]
    os.kill(pids[1], signal.SIGKILL)
    wait_for(lambda: s.job_dir.read_state().get("state") == "failed", 30, "the session to break")
    reason = s.job_dir.read_state()["reason"]
    assert reason.startswith("rank 1 was killed by signal 9 (SIGKILL)"), reason
    wait_for(
        lambda: not psutil.pid_exists(pids[0]) or psutil.Process(pids[0]).status() == "zombie",
        15,
        "rank 0 to stop",
    )
    with pytest.raises(SessionBroken, match="rank 1 was killed by signal 9"):
        s.run("print(1)")


def test_an_idle_session_is_stopped(started: Any) -> None:
    from alchemist.backends.local.procs import read_pid
    from alchemist.interactive import SessionError

    s = started(2, idle_timeout=2)
    pids = [read_pid(s.job_dir.rank_pid(r)) for r in s.ranks]
    wait_for(lambda: s.job_dir.read_state().get("state") == "cancelled", 60, "the idle stop")
    assert "--idle-timeout" in s.job_dir.read_state()["reason"]
    wait_for(lambda: not any(psutil.pid_exists(p) for p in pids), 15, "the ranks to end")
    with pytest.raises(SessionError, match="was stopped"):
        s.run("print(1)")


def test_the_advice_after_a_rank_died_works_when_followed(
    started: Any, ip: Any, capsys: Any
) -> None:
    """A rank dies; the next cell says to run ``%alchemist_session restart``. Before,
    restart, status and stop then answered "no session is running in this kernel"."""
    from alchemist.backends.local.procs import read_pid
    from alchemist.interactive import SessionBroken, current_session

    s = started(2)
    os.kill(read_pid(s.job_dir.rank_pid(1)) or 0, signal.SIGKILL)
    wait_for(lambda: s.job_dir.read_state().get("state") == "failed", 30, "the session to break")
    with pytest.raises(SessionBroken, match="%alchemist_session restart"):
        s.run("print(1)")
    capsys.readouterr()
    ip.run_line_magic("alchemist_session", "status")
    assert capsys.readouterr().out.startswith(f"session {s.id}: failed (rank 1 was killed")
    ip.run_line_magic("alchemist_session", "restart")
    new = current_session()
    try:
        assert new is not None and new.id != s.id
        assert f"session {s.id} stopped; session {new.id}: 2 fresh ranks ready" in (
            capsys.readouterr().out
        )
        new.run(ALL_REDUCE)
        assert "rank=1 sum=3" in capsys.readouterr().out
    finally:
        if new is not None:
            new.stop()
    ip.run_line_magic("alchemist_session", "stop")  # stopped already: one line says so
    assert capsys.readouterr().out.strip().endswith("has ended already: succeeded")


def test_an_interrupted_px_cell_ends_with_one_line(started: Any, ip: Any, capsys: Any) -> None:
    """It ended with a 30-line traceback through Alchemist's and ipyparallel's frames."""
    import threading

    from IPython.core.error import UsageError

    s = started(2)
    logs = [s.job_dir.rank_log(r) for r in s.ranks]

    def interrupt_when_looping() -> None:
        wait_for(lambda: all("looping" in p.read_text() for p in logs), 120, "the ranks to loop")
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_looping, daemon=True).start()
    loop = "import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.01)"
    with pytest.raises(UsageError) as e:
        ip.run_cell_magic("alchemist_px", "", loop)
    assert str(e.value) == (
        f"cell interrupted; session {s.id} goes on (the next cell checks the ranks)"
    )
    assert "every rank stopped" in capsys.readouterr().out
    ip.run_cell_magic("alchemist_px", "", ALL_REDUCE)  # and it does go on
    assert "rank=1 sum=3" in capsys.readouterr().out
