"""Retention (``alchemist prune``): a dry run first, then only the user's own finished
jobs go, row and folder; a running job and another user's job are never touched.

Real parts: the CLI's ``main``, the SQLite index, real job folders, a real running
local job (its supervisor and rank process)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from alchemist import cli, client
from alchemist.job import config
from alchemist.job.jobdir import JobDir
from alchemist.job.spec import JobSpec, JobState
from alchemist.store import JobRecord, get_store


def _old_job(
    job_id: str, *, days: float, owner: str | None = None, state: str = "succeeded"
) -> Path:
    owner = owner or config.current_user()
    jd = JobDir(config.jobs_root() / job_id).create()
    jd.spec.write_text(json.dumps(JobSpec(name=job_id).to_dict()))
    (jd.root / "checkpoint.pt").write_bytes(b"x" * 4096)
    ended = time.time() - days * 86_400
    get_store().add(
        JobRecord(
            id=job_id,
            owner=owner,
            name=job_id,
            backend="local",
            state=state,
            reason=None,
            created=ended - 60,
            started=ended - 50,
            finished=ended,
            restarts=0,
            spec=JobSpec(name=job_id).to_dict(),
            job_dir=str(jd.root),
        )
    )
    return jd.root


def test_a_dry_run_first_then_only_old_finished_jobs_of_the_user_go(
    capsys: pytest.CaptureFixture[str],
) -> None:
    old = _old_job("jold", days=40)
    old_failed = _old_job("joldfail", days=45, state="failed")
    recent = _old_job("jrecent", days=2)
    bobs = _old_job("jbob", days=90, owner="bob")
    running = client.submit("import time\ntime.sleep(120)", namespace={}, workers=1, name="long")
    try:
        deadline = time.monotonic() + 60
        while running.status().state != JobState.RUNNING:
            assert time.monotonic() < deadline, "the long job never ran"
            time.sleep(0.1)
        get_store().update(running.id, created=time.time() - 90 * 86_400)  # old, but running

        assert cli.main(["prune", "--older-than", "30d"]) == 0
        out, err = capsys.readouterr()
        assert sorted(line.split()[0] for line in out.splitlines()) == ["jold", "joldfail"]
        assert "would remove 2 finished jobs" in err and "--yes" in err
        assert old.exists() and get_store().get("jold") is not None  # nothing removed

        assert cli.main(["prune", "--older-than", "30d", "--yes"]) == 0
        assert "removed 2 jobs" in capsys.readouterr().err
        assert not old.exists() and not old_failed.exists()
        assert get_store().get("jold") is None and get_store().get("joldfail") is None
        assert recent.exists() and get_store().get("jrecent") is not None
        assert bobs.exists() and get_store().get("jbob") is not None  # another user's
        assert running.status().state == JobState.RUNNING and running.job_dir.root.exists()
        assert {j.id for j in client.jobs()} == {"jrecent", running.id}
    finally:
        running.cancel()


def test_keep_removes_the_finished_jobs_beyond_the_newest_n(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for i in range(5):
        _old_job(f"j{i}", days=5 - i)  # j4 newest
    assert cli.main(["prune", "--keep", "2", "--yes"]) == 0
    assert [j.id for j in client.jobs()] == ["j4", "j3"]


def test_a_row_naming_a_folder_outside_the_jobs_folder_never_removes_it(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "data.bin").write_bytes(b"keep")
    _old_job("jtampered", days=50)
    get_store().update("jtampered", job_dir=str(outside))
    assert cli.main(["prune", "--older-than", "1d", "--yes"]) == 0
    assert (outside / "data.bin").read_bytes() == b"keep"
    assert get_store().get("jtampered") is None


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["prune"], "say what to prune"),
        (["prune", "--older-than", "a month"], "like 30d or 12h"),
    ],
)
def test_bad_prune_arguments_are_one_clear_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
