"""Listing jobs: the state filter counts before the limit, and an unreadable job is
listed apart instead of failing the whole list."""

from __future__ import annotations

import time

from alchemist import client, config
from alchemist.spec import JobSpec
from alchemist.store import JobRecord, get_store


def _add(job_id: str, state: str, age: float, spec: dict | None = None) -> None:
    get_store().add(
        JobRecord(
            id=job_id,
            owner=config.current_user(),
            name=job_id,
            backend="local",
            state=state,
            reason=None,
            created=time.time() - age,
            started=None,
            finished=time.time() - age,
            restarts=0,
            spec=JobSpec(name=job_id).to_dict() if spec is None else spec,
            job_dir=str(config.jobs_root() / job_id),
        )
    )


def test_state_filter_applies_before_the_limit() -> None:
    _add("old-failed", "failed", age=30)
    for i in range(5):
        _add(f"new-ok-{i}", "succeeded", age=10 - i)
    got = client.jobs(state="failed", limit=2)
    assert [j.id for j in got] == ["old-failed"]
    assert [j.id for j in client.jobs(limit=2)] == ["new-ok-4", "new-ok-3"]


def test_an_unreadable_job_is_listed_apart_and_hides_no_other() -> None:
    _add("good-old", "succeeded", age=20)
    _add("damaged", "succeeded", age=10, spec={"workers": 2, "colour": "red"})
    _add("good-new", "succeeded", age=5)
    listing = client.list_jobs()
    assert [j.id for j in listing.jobs] == ["good-new", "good-old"]
    assert len(listing.skipped) == 1
    job_id, why = listing.skipped[0]
    assert job_id == "damaged" and "colour" in why


def test_a_job_directory_whose_row_was_lost_is_indexed_again(monkeypatch) -> None:
    job = client.submit("x = 1", namespace={}, workers=2)
    assert job.wait(timeout=120).state.value == "succeeded"
    get_store().delete(job.id)  # the row a racing submit once failed to write
    listed = client.jobs()
    assert [j.id for j in listed] == [job.id]
    assert listed[0].status().state.value == "succeeded"
    assert listed[0].name == job.name and listed[0].created == job.created


def test_another_users_job_directory_is_never_adopted() -> None:
    import json

    from alchemist.jobdir import JobDir

    jd = JobDir(config.jobs_root() / "jbob0000001").create()
    jd.spec.write_text(json.dumps(JobSpec(name="bobs").to_dict()))
    jd.record.write_text(json.dumps({"id": "jbob0000001", "owner": "bob", "created": 1.0}))
    assert client.jobs() == []
    assert get_store().get("jbob0000001") is None
