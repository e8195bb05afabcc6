"""Sessions take the machine's CPU slots and GPUs as batch jobs do: they wait in the same
queue (real supervisors, real engines, real torchrun jobs; the capacity is set with the
documented ``ALCHEMIST_LOCAL_CPU_SLOTS``)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from alchemist import client
from alchemist.job.spec import JobState
from tests.interactive.conftest import wait_for

HOLD = """
import os, time
deadline = time.time() + 120
while not os.path.exists({release!r}) and time.time() < deadline:
    time.sleep(0.05)
"""


def test_a_session_waits_for_a_batch_job_s_slots_and_a_batch_job_for_a_session_s(
    started: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    """Two CPU slots: a session started while a 2-rank batch job runs is ``queued`` with
    the queue's reason (the start says so and waits, its start timeout not counting) and
    comes up when the job ends; a batch job promoted while the session runs waits until
    the session stops, and promote says so."""
    monkeypatch.setenv("ALCHEMIST_LOCAL_CPU_SLOTS", "2")
    release = tmp_path / "release"
    job = client.submit(HOLD.format(release=str(release)), namespace={}, workers=2, name="hold")
    wait_for(lambda: job.status().state == JobState.RUNNING, 120, "the batch job to run")

    got: dict[str, Any] = {}

    def start() -> None:
        try:
            got["session"] = started(2, start_timeout=5)  # queued time does not count
        except BaseException as e:  # reported by the assertion below
            got["error"] = e

    thread = threading.Thread(target=start, daemon=True)
    thread.start()

    def queued_session() -> Any:
        for j in client.jobs():
            if j.to_dict().get("kind") == "session" and j.status().state == JobState.QUEUED:
                return j
        return None

    wait_for(queued_session, 60, "the session to queue")
    assert queued_session().status().reason == (
        "waiting for 2 CPU slots (0 of 2 free); 0 jobs ahead"
    )
    release.touch()
    thread.join(timeout=180)
    assert "error" not in got, got.get("error")
    assert "queued: waiting for 2 CPU slots (0 of 2 free)" in capsys.readouterr().out
    s = got["session"]
    s.run("print('up')")
    assert "[rank 1] up" in capsys.readouterr().out

    s.run("x = 1")
    capsys.readouterr()
    second = s.promote(name="after-session")  # the cells that worked, as a batch job
    assert f"job {second.id} waits in the queue while session {s.id} holds" in (
        capsys.readouterr().err
    )
    wait_for(lambda: second.status().state == JobState.QUEUED, 60, "the batch job to queue")
    s.stop()
    assert second.wait(timeout=180).state == JobState.SUCCEEDED, second.logs()
    assert job.status().state == JobState.SUCCEEDED


def test_a_session_larger_than_the_machine_is_refused_at_once(
    monkeypatch: pytest.MonkeyPatch, alchemist_home: Path
) -> None:
    from alchemist.interactive import SessionError, session

    monkeypatch.setenv("ALCHEMIST_LOCAL_CPU_SLOTS", "2")
    with pytest.raises(SessionError, match=r"runs 3 ranks but this machine has 2 CPU slots"):
        session(3)
    assert [j for j in client.jobs() if j.to_dict().get("kind") == "session"] == []
