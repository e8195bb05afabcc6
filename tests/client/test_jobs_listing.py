"""Listing jobs: the state filter counts before the limit, and an unreadable job is
listed apart instead of failing the whole list."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy.orm import Session

from alchemist import client, jobindex
from alchemist.errors import CursorError
from alchemist.job import config
from alchemist.job.spec import JobSpec
from alchemist.store import JobRecord, MetaRow, get_store


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


def test_a_submit_that_died_between_its_files_and_its_row_is_indexed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C (or a killed kernel) just after the job's files, before its row: nothing
    ran (the backend comes after the row), and the job is listed from its folder, not
    lost."""
    from alchemist.store import JobStore

    def interrupted(self: JobStore, record: JobRecord) -> None:
        raise KeyboardInterrupt

    assert client.jobs() == []  # the panel's poll ran before: the folders were scanned
    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        m.setattr(JobStore, "add_new", interrupted)
        client.submit("x = 1", namespace={}, workers=1, name="interrupted")
    (folder,) = [p for p in config.jobs_root().iterdir() if not p.name.startswith(".")]
    listed = client.jobs()
    assert [(j.id, j.name) for j in listed] == [(folder.name, "interrupted")]
    assert list((config.jobs_root() / jobindex.MARKS).iterdir()) == []  # settled
    assert [j.id for j in client.jobs()] == [folder.name]  # once


def test_a_deleted_row_of_an_earlier_index_is_found_by_the_first_scan() -> None:
    """An index that has not scanned this owner's folders yet (new, deleted, or made by
    a version without marks) reads them all once."""
    job = client.submit("x = 1", namespace={}, workers=1)
    assert job.wait(timeout=120).state.value == "succeeded"
    store = get_store()
    store.delete(job.id)
    with Session(store.engine) as s, s.begin():
        s.query(MetaRow).delete()  # as an index an earlier version made
    listed = client.jobs()
    assert [j.id for j in listed] == [job.id]
    assert listed[0].status().state.value == "succeeded"
    assert listed[0].name == job.name and listed[0].created == job.created


def test_pages_follow_each_other_without_overlap_or_gap() -> None:
    for i in range(23):
        _add(f"j{i:03d}", "succeeded", age=100 - i)
    _add("tie-a", "failed", age=0)
    tied = get_store().get("j010")
    assert tied is not None
    get_store().update("tie-a", created=tied.created)  # same time: ordered by id
    seen: list[str] = []
    before = None
    pages = 0
    while True:
        listing = client.list_jobs(limit=5, before=before)
        seen.extend(j.id for j in listing.jobs)
        pages += 1
        before = listing.next
        if before is None:
            break
    everything = [j.id for j in client.jobs()]
    assert seen == everything and len(seen) == 24 and len(set(seen)) == 24
    assert pages == 5
    failed = client.list_jobs(state="failed", limit=1)
    assert [j.id for j in failed.jobs] == ["tie-a"]


def test_a_page_reads_a_page_of_rows_however_long_the_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for i in range(400):
        _add(f"h{i:04d}", "succeeded", age=1000 - i)
    client.jobs(limit=1)  # the first listing scans the folders once
    built: list[str] = []
    real = JobRecord._from_row.__func__  # type: ignore[attr-defined]

    def counting(cls: type[JobRecord], row: Any) -> JobRecord:
        built.append(row.id)
        return real(cls, row)

    monkeypatch.setattr(JobRecord, "_from_row", classmethod(counting))
    page = client.list_jobs(limit=10)
    assert [j.id for j in page.jobs] == [f"h{i:04d}" for i in range(399, 389, -1)]
    assert page.next is not None
    assert len(built) <= 50, len(built)  # one batch of rows, not the 400


def test_a_bad_page_cursor_is_a_clear_error() -> None:
    with pytest.raises(CursorError, match="not a page cursor"):
        client.list_jobs(limit=5, before="yesterday")


def test_another_users_job_directory_is_never_adopted() -> None:
    import json

    from alchemist.job.jobdir import JobDir

    jd = JobDir(config.jobs_root() / "jbob0000001").create()
    jd.spec.write_text(json.dumps(JobSpec(name="bobs").to_dict()))
    jd.record.write_text(json.dumps({"id": "jbob0000001", "owner": "bob", "created": 1.0}))
    assert client.jobs() == []
    assert get_store().get("jbob0000001") is None
