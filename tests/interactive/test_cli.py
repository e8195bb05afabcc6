"""``alchemist session list|stop``: sessions from a terminal."""

from __future__ import annotations

from typing import Any

from alchemist.cli import main


def test_session_list_and_stop(started: Any, capsys: Any) -> None:
    import alchemist

    s = started(2)
    batch = alchemist.submit("print('batch')", namespace={}, workers=1, name="plain")
    assert batch.wait(timeout=120).state.value == "succeeded"
    capsys.readouterr()

    assert main(["session", "list"]) == 0
    out = capsys.readouterr().out
    assert s.id in out and "running" in out and batch.id not in out  # sessions only
    assert main(["session", "stop", batch.id]) == 2
    assert capsys.readouterr().err.strip() == (
        f"alchemist: error: job {batch.id} is a batch job, not a session:"
        f" alchemist cancel {batch.id} stops it"
    )
    assert main(["session", "stop"]) == 2
    assert "needs the session's id" in capsys.readouterr().err

    assert main(["session", "stop", s.id]) == 0  # a fresh handle, as from a terminal
    assert capsys.readouterr().out.strip() == f"session {s.id} stopped"
    assert alchemist.attach(s.id).status().state.value == "succeeded"
    assert s.status()["ranks_alive"] == []
    assert main(["session", "stop", s.id]) == 0  # idempotent, and says so
    assert "had already ended: succeeded" in capsys.readouterr().err
    assert main(["session", "list", "--state", "running"]) == 0
    assert capsys.readouterr().out.strip() == "no sessions running"
