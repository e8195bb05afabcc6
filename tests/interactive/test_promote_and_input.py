"""Promotion to a batch job, bad input, the magics, and who may reach a session."""

from __future__ import annotations

import json
import stat
import sys
from typing import Any

import pytest

from tests.interactive.conftest import assert_guessed_key_refused

LOG_CELL = """
import alchemist
ctx = alchemist.context()
for step in range(3):
    alchemist.log(step, value=float(10 * ctx.rank + step))
"""


def _metrics(job_dir: Any) -> list[tuple[int, int, dict[str, Any]]]:
    events = []
    for path in sorted(job_dir.metrics_dir.glob("rank-*.jsonl")):
        for line in path.read_text().splitlines():
            e = json.loads(line)
            events.append((e["rank"], e["step"], e["values"]))
    return sorted(events, key=lambda e: (e[0], e[1]))


def test_promote_submits_the_cells_that_worked(started: Any, capsys: Any) -> None:
    from alchemist.interactive import CellFailed
    from alchemist.interactive.sessions import Session

    s: Session = started(2)
    s.run("scale = 1")
    with pytest.raises(CellFailed):
        s.run("raise RuntimeError('typo')")
    s.run(LOG_CELL)
    s.run("print('rank 0 only')", targets=[0])
    capsys.readouterr()
    dry = s.promote(dry_run=True, namespace={})
    err = capsys.readouterr().err
    assert "cell #2 left out: failed" in err
    script = s.promotion().script
    assert "raise RuntimeError" not in script and "scale = 1" in script
    assert "if alchemist.context().rank in {0}:\n    print('rank 0 only')" in script
    assert "nothing was submitted" in dry.text
    s.stop()  # the batch job needs the CPU slots
    job = s.promote(namespace={}, name="promoted")
    st = job.wait(timeout=240)
    assert st.state.value == "succeeded", (st.reason, job.logs())
    assert job.spec.world_size == 2 and job.spec.entry == "cell"
    session_metrics = _metrics(s.job_dir)
    assert session_metrics == [
        (r, k, {"value": float(10 * r + k)}) for r in (0, 1) for k in range(3)
    ]
    assert _metrics(job.job_dir) == session_metrics
    assert "rank 0 only" in job.logs(rank=0) and "rank 0 only" not in job.logs(rank=1)


def test_bad_input_is_one_line_and_leaves_nothing_running(started: Any, ip: Any) -> None:
    from IPython.core.error import UsageError

    from alchemist.interactive import SessionError, session

    with pytest.raises(UsageError, match="no session is running in this kernel"):
        ip.run_cell_magic("alchemist_px", "", "print(1)")
    with pytest.raises(UsageError, match="--collective-timeout"):
        ip.run_line_magic("alchemist_session", "start -n 2 --collective-timeout -3")
    with pytest.raises(SessionError, match="workers must be a positive integer"):
        session(0)
    # engines that cannot come up within the bound: one line, nothing left (conftest checks)
    with pytest.raises(
        SessionError, match=r"0 of 2 engines came up within 0.5 s \(--start-timeout\)"
    ):
        session(2, start_timeout=0.5)
    from alchemist import client

    (failed,) = client.jobs()
    assert failed.status().state.value == "failed"
    # a running session: a second start is refused; unknown targets are refused
    ip.run_line_magic("alchemist_session", "start -n 2")
    with pytest.raises(UsageError, match="is already running"):
        ip.run_line_magic("alchemist_session", "start -n 2")
    with pytest.raises(UsageError, match="unknown target rank"):
        ip.run_cell_magic("alchemist_px", "--targets 0,5", "print(1)")


def test_the_magics(ip: Any, capfd: Any) -> None:
    from IPython.core.error import UsageError

    from alchemist.interactive import current_session

    ip.run_line_magic("alchemist_session", "start -n 2")
    s = current_session()
    assert s is not None
    ip.user_ns["data"] = {"a": 41}
    ip.run_line_magic("alchemist_push", "data")
    ip.run_cell_magic("alchemist_px", "", "data['a'] += 1\nprint('a is', data['a'])")
    out = capfd.readouterr().out
    assert "[rank 0] a is 42" in out and "[rank 1] a is 42" in out
    with pytest.raises(UsageError, match="no variable nope"):
        ip.run_line_magic("alchemist_push", "nope")
    ip.run_line_magic("alchemist_autopx", "")
    ip.run_cell("print('auto', data['a'])")
    ip.run_line_magic("alchemist_autopx", "")
    out = capfd.readouterr().out
    assert "[rank 1] auto 42" in out
    ip.run_cell("print('local')")
    assert capfd.readouterr().out.strip() == "local"
    with pytest.raises(UsageError, match="the cell failed on ranks 0, 1"):
        ip.run_cell_magic("alchemist_px", "--no-stream", "1 / 0")
    st = ip.run_line_magic("alchemist_session", "status")
    assert st["state"] == "running" and st["cells"] == 3 and st["cells_ok"] == 2
    ip.run_line_magic("alchemist_session", "promote --dry-run -n 1 --name small")
    out = capfd.readouterr()
    assert "world size 1" in out.out and "cell #3 left out: failed" in out.err
    ip.run_line_magic("alchemist_session", "stop")
    assert current_session() is None
    # the session just stopped still says how it ended, and promotes from its transcript
    assert ip.run_line_magic("alchemist_session", "status")["state"] == "succeeded"
    capfd.readouterr()
    ip.run_line_magic("alchemist_session", "promote --dry-run -n 1 --name after-stop")
    assert "world size 1" in capfd.readouterr().out


def test_another_user_cannot_reach_the_controller(started: Any) -> None:
    """The connection files (they hold the key that signs every message) are 0600 in a
    0700 folder: ``nobody`` cannot read them, and a client with the right ports but a
    guessed key is never answered, so it cannot run code on the ranks."""
    from tests.support.helpers import as_nobody

    s = started(2)
    security = s.dirs.security
    for folder in (security, s.dirs.root, s.job_dir.root):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    for f in security.glob("*.json"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    read = as_nobody(
        sys.executable,
        "-c",
        "import sys\ntry:\n    open(sys.argv[1]).read()\nexcept OSError as e:\n    print('denied', type(e).__name__)",
        str(s.dirs.client_file),
    )
    assert read.stdout.strip() == "denied PermissionError", read
    assert_guessed_key_refused(s.dirs.client_file, s.job_dir.root.parent / "pwned")
