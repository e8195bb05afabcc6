"""Getting a session back: restart with replay, attach after a kernel restart, and an
interrupt while one rank waits in a collective.

Real ipyparallel engines (two local processes, gloo) started through Alchemist; the
kernel-restart test drives a real Jupyter kernel through jupyter_client.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.interactive.conftest import ALL_REDUCE, ANSI, wait_for


def test_restart_of_a_broken_session_replays_only_the_cells_named(ip: Any, capsys: Any) -> None:
    """A rank dies; ``restart --replay 1,3`` brings up fresh ranks (a new session) and runs
    cells 1 and 3 again, in order, and nothing else; a bad cell number changes nothing."""
    from IPython.core.error import UsageError

    from alchemist import client
    from alchemist.backends.local.procs import read_pid
    from alchemist.interactive import current_session, transcript

    ip.run_line_magic("alchemist_session", "start -n 2")
    old = current_session()
    assert old is not None
    ip.run_cell_magic("alchemist_px", "", "import alchemist\nx = 10 * alchemist.context().rank")
    ip.run_cell_magic("alchemist_px", "", "y = 'not replayed'")
    ip.run_cell_magic("alchemist_px", "", "x += 1\nprint('x is', x)")
    with pytest.raises(UsageError, match=r"no cell #7 in session"):
        ip.run_line_magic("alchemist_session", "restart --replay 1,7")
    assert current_session() is old and old.running()  # the bad number changed nothing
    os.kill(read_pid(old.job_dir.pids / "rank-1.pid"), signal.SIGKILL)
    wait_for(lambda: not old.running(), 30, "the session to break")
    capsys.readouterr()

    ip.run_line_magic("alchemist_session", "restart --replay 1,3")
    new = current_session()
    assert new is not None and new.id != old.id and new.running()
    out = capsys.readouterr().out
    assert "replaying cell #1" in out and "replaying cell #3" in out and "#2" not in out
    assert "[rank 0] x is 1" in out and "[rank 1] x is 11" in out
    assert new.pull("x", rank=1) == 11
    from alchemist.interactive import SessionError

    with pytest.raises(SessionError, match="rank 0 has no variable 'y'"):
        new.pull("y", rank=0)
    # the new session's transcript holds the replayed cells, so it promotes them
    assert [r.source for r in transcript.read(new.dirs.transcript)] == [
        "import alchemist\nx = 10 * alchemist.context().rank",
        "x += 1\nprint('x is', x)",
    ]
    assert client.attach(old.id).status().state.value == "failed"


def _kernel_output(kc: Any, code: str, timeout: float = 120) -> str:
    """Run ``code`` in the kernel; its stdout and stderr and the text of what it
    displayed (a px cell's rank output widget, in its final form), failing on an error."""
    chunks: list[str] = []
    displays: dict[str, str] = {}

    def hook(msg: dict[str, Any]) -> None:
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            chunks.append(content["text"])
        elif kind == "error":
            chunks.append("\n".join(content["traceback"]))
        elif kind in ("display_data", "update_display_data"):
            key = (content.get("transient") or {}).get("display_id") or str(len(displays))
            displays[key] = str(content["data"].get("text/plain", "")) + "\n"

    reply = kc.execute_interactive(code, timeout=timeout, output_hook=hook)
    text = ANSI.sub("", "".join(chunks) + "".join(displays.values()))
    assert reply["content"]["status"] == "ok", text
    return text


def test_a_session_outlives_its_kernel_and_a_new_kernel_attaches(alchemist_home: Path) -> None:
    from jupyter_client.manager import start_new_kernel

    from alchemist import client
    from alchemist.interactive.sessions import Session

    km, kc = start_new_kernel(kernel_name="python3")  # inherits ALCHEMIST_HOME
    session_id = None
    try:
        _kernel_output(kc, "%load_ext alchemist", timeout=60)
        out = _kernel_output(kc, "%alchemist_session start -n 2")
        session_id = re.search(r"session (s\S+): 2 ranks ready", out).group(1)  # type: ignore[union-attr]
        _kernel_output(kc, "%%alchemist_px\nimport alchemist\nx = 100 + alchemist.context().rank")
        km.shutdown_kernel(now=True)  # SIGKILL to the kernel's process group
        kc.stop_channels()
        assert not km.is_alive()

        km, kc = start_new_kernel(kernel_name="python3")
        _kernel_output(kc, "%load_ext alchemist", timeout=60)
        out = _kernel_output(kc, f"%alchemist_session attach {session_id}")
        assert f"attached to session {session_id} (2 ranks)" in out
        out = _kernel_output(kc, "%%alchemist_px\nprint('x is', x)")  # the state was kept
        assert "[rank 0] x is 100" in out and "[rank 1] x is 101" in out
        out = _kernel_output(kc, "%alchemist_session status")
        assert f"session {session_id}: running" in out and "2 cells (2 ok)" in out
        _kernel_output(kc, "%alchemist_session stop")
    finally:
        km.shutdown_kernel(now=True)
        kc.stop_channels()
        if session_id is not None:  # idempotent: stops what the test left running
            Session(client.attach(session_id).job_dir).stop()
    assert client.attach(session_id).status().state.value == "succeeded"


def test_interrupt_while_a_rank_waits_in_a_collective(started: Any, capsys: Any) -> None:
    """Rank 1 loops in Python while rank 0 waits for it in all_reduce. The interrupt stops
    rank 1 at once; rank 0 (gloo ignores signals) is named, with the collective it waits
    in, and the next cells are refused until the collective timeout frees it; then the
    health check rebuilds the group and an all_reduce is correct."""
    from alchemist.interactive import SessionError

    s = started(2, collective_timeout=12)

    def interrupt_when_rank_0_waits() -> None:
        wait_for(
            lambda: "rank 0 waits in all_reduce" in str(s.diagnose(timeout=2).get("headline")),
            60,
            "rank 0 to wait in all_reduce",
        )
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_rank_0_waits, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        s.run(
            "import time, torch, torch.distributed as dist, alchemist\n"
            "if alchemist.context().rank == 1:\n"
            "    while True:\n"
            "        time.sleep(0.01)\n"
            "dist.all_reduce(torch.ones(1))\n"
        )
    interrupted_at = time.monotonic()
    out = capsys.readouterr().out
    assert "interrupted, but rank 0 still runs" in out, out
    assert "rank 0 waits in all_reduce" in out, out
    assert "collective timeout (12 s)" in out
    # rank 1 is free, rank 0 is not: a cell now is refused in one line, and runs nowhere
    with pytest.raises(SessionError, match=r"^rank 0 still runs the interrupted cell"):
        s.run("print('too soon')")
    # once the collective timeout ends rank 0's wait, the next all_reduce is right
    while True:
        try:
            s.run(ALL_REDUCE)
            break
        except SessionError as e:
            assert "still runs the interrupted cell" in str(e), e
            assert time.monotonic() - interrupted_at < 12 + 60, "rank 0 never came back"
            time.sleep(0.5)
    out = capsys.readouterr().out
    assert "too soon" not in out
    assert "ranks are out of step" in out and "process group was rebuilt" in out
    assert "[rank 0] rank=0 sum=3" in out and "[rank 1] rank=1 sum=3" in out
    assert all(psutil.pid_exists(p) for p in _rank_pids(s))


def _rank_pids(s: Any) -> list[int]:
    from alchemist.backends.local.procs import read_pid

    return [read_pid(s.job_dir.rank_pid(r)) for r in s.ranks]
