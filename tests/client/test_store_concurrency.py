"""The job index under concurrency: a fresh store opened by many threads and processes
at once loses no job (twelve parallel ``alchemist submit`` gave eleven rows before)."""

from __future__ import annotations

import multiprocessing as mp
import threading
from pathlib import Path

from alchemist import store
from alchemist.store import JobStore
from tests.support.helpers import job_record


def _open_and_add(url: str, job_id: str, barrier: object) -> None:
    barrier.wait()  # type: ignore[attr-defined]
    JobStore(url).add(job_record(job_id))


def test_threads_opening_a_fresh_store_all_record_their_job(alchemist_home: Path) -> None:
    store._stores.clear()
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def submit(i: int) -> None:
        barrier.wait()
        try:
            store.get_store().add(job_record(f"t{i}"))
        except BaseException as e:  # reported below, with the others
            errors.append(e)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert len({id(s) for s in store._stores.values()}) == 1
    assert sorted(r.id for r in store.get_store().list("ana")) == sorted(f"t{i}" for i in range(8))


def test_processes_creating_a_fresh_store_at_once_all_record_their_job(
    alchemist_home: Path,
) -> None:
    url = f"sqlite:///{alchemist_home / 'jobs.sqlite'}"
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(12)
    procs = [ctx.Process(target=_open_and_add, args=(url, f"p{i}", barrier)) for i in range(12)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * 12
    ids = sorted(r.id for r in JobStore(url).list("ana"))
    assert ids == sorted(f"p{i}" for i in range(12))


def test_two_processes_setting_a_new_index_fact_at_once_both_succeed(tmp_path: Path) -> None:
    """The first listings on a fresh home each note a fact of the index (that an owner's
    folders were scanned): the second of two at once failed with a raw
    ``IntegrityError``. Here the other process's row lands between this one's read and
    its insert, as it does in that race, every time."""
    from sqlalchemy import event, text
    from sqlalchemy.orm import Session

    url = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    mine, theirs = JobStore(url), JobStore(url)
    raced = []

    @event.listens_for(Session, "before_flush")
    def the_other_process_first(session: Session, *_: object) -> None:
        if not raced and any(isinstance(o, store.MetaRow) for o in session.new):
            raced.append(True)
            with theirs.engine.begin() as conn:
                conn.execute(
                    text("insert into index_meta (key, value) values ('scanned:ana', 'old')")
                )

    try:
        mine.set_meta("scanned:ana", "new")
    finally:
        event.remove(Session, "before_flush", the_other_process_first)
    assert raced and mine.get_meta("scanned:ana") == "new"
