"""The job store: one row per job, owned by a user (SQLAlchemy).

The embedded default is an SQLite file under ``ALCHEMIST_HOME``; any SQLAlchemy URL
(``ALCHEMIST_DB_URL``, e.g. PostgreSQL) works in production. The store is an index:
the job directory and the backend are the truth about a running job, and the client
writes reconciled states back here.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float, Integer, String, Text, create_engine, event, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from alchemist import config


class _Base(DeclarativeBase):
    pass


class JobRow(_Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(255), index=True)
    name: Mapped[str] = mapped_column(String(255))
    backend: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(32), index=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created: Mapped[float] = mapped_column(Float, index=True)
    started: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished: Mapped[float | None] = mapped_column(Float, nullable=True)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    spec: Mapped[str] = mapped_column(Text)
    job_dir: Mapped[str] = mapped_column(Text)


@dataclass
class JobRecord:
    """A job as the store knows it."""

    id: str
    owner: str
    name: str
    backend: str
    state: str
    reason: str | None
    created: float
    started: float | None
    finished: float | None
    restarts: int
    spec: dict[str, Any]
    job_dir: str

    @classmethod
    def _from_row(cls, row: JobRow) -> JobRecord:
        return cls(
            id=row.id,
            owner=row.owner,
            name=row.name,
            backend=row.backend,
            state=row.state,
            reason=row.reason,
            created=row.created,
            started=row.started,
            finished=row.finished,
            restarts=row.restarts or 0,
            spec=json.loads(row.spec),
            job_dir=row.job_dir,
        )


class JobStore:
    """CRUD over job records. Safe to share between threads (one session per call)."""

    def __init__(self, url: str) -> None:
        self.url = url
        kwargs: dict[str, Any] = {}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
        self.engine: Engine = create_engine(url, **kwargs)
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        _create_tables(self.engine)

    def add(self, record: JobRecord) -> None:
        with Session(self.engine) as s, s.begin():
            s.add(
                JobRow(
                    id=record.id,
                    owner=record.owner,
                    name=record.name,
                    backend=record.backend,
                    state=record.state,
                    reason=record.reason,
                    created=record.created,
                    started=record.started,
                    finished=record.finished,
                    restarts=record.restarts,
                    spec=json.dumps(record.spec),
                    job_dir=record.job_dir,
                )
            )

    def get(self, job_id: str) -> JobRecord | None:
        with Session(self.engine) as s:
            row = s.get(JobRow, job_id)
            return JobRecord._from_row(row) if row else None

    def list(
        self, owner: str, state: str | None = None, limit: int | None = None
    ) -> list[JobRecord]:
        """The owner's jobs, newest first, optionally only those in ``state``."""
        q = select(JobRow).where(JobRow.owner == owner)
        if state:
            q = q.where(JobRow.state == state)
        q = q.order_by(JobRow.created.desc())
        if limit:
            q = q.limit(limit)
        with Session(self.engine) as s:
            return [JobRecord._from_row(r) for r in s.scalars(q)]

    def update(self, job_id: str, **fields: Any) -> None:
        with Session(self.engine) as s, s.begin():
            row = s.get(JobRow, job_id)
            if row is None:
                return
            for k, v in fields.items():
                setattr(row, k, v)

    def delete(self, job_id: str) -> None:
        with Session(self.engine) as s, s.begin():
            row = s.get(JobRow, job_id)
            if row is not None:
                s.delete(row)


def _create_tables(engine: Engine, attempts: int = 20) -> None:
    """Create the tables unless they exist, safely when other processes do the same.

    ``create_all`` checks for each table, then creates the missing ones: two processes
    opening a fresh store at once (twelve ``alchemist submit`` in parallel) can both see
    no table, and the second ``CREATE TABLE`` fails with "already exists". A retry checks
    again and finds the table the other process made.
    """
    for attempt in range(attempts):
        try:
            _Base.metadata.create_all(engine)
            return
        except OperationalError as e:
            if "already exists" not in str(e) or attempt == attempts - 1:
                raise
            time.sleep(0.01 * (attempt + 1))


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL lets the kernel, the Jupyter server and the CLI read while one writes.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


_stores: dict[str, JobStore] = {}
_stores_lock = threading.Lock()


def get_store() -> JobStore:
    """The store for the configured URL (one per URL and process; thread-safe)."""
    url = config.db_url()
    with _stores_lock:
        if url not in _stores:
            _stores[url] = JobStore(url)
        return _stores[url]


def now() -> float:
    return time.time()
