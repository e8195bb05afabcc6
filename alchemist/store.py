"""The job store: one row per job, owned by a user (SQLAlchemy).

The embedded default is an SQLite file under ``ALCHEMIST_HOME``; any SQLAlchemy URL
(``ALCHEMIST_DB_URL``, e.g. PostgreSQL) works in production. The store is an index:
the job directory and the backend are the truth about a running job, and the client
writes reconciled states back here. A lost index is rebuilt from the job directories
(:func:`alchemist.client.list_jobs`); a store whose file was deleted or replaced is
opened again (:func:`get_store`).

An SQLite index is the owner's alone (the file and its ``-wal``, ``-shm`` and
``-journal`` siblings 0600, a folder Alchemist makes for it 0700), and runs in WAL mode
only on a filesystem of this machine. SQLite's WAL keeps its index in shared memory,
which processes on different hosts do not share: on a network filesystem (NFS,
CIFS/SMB, CephFS, Lustre, GlusterFS, any FUSE filesystem; :data:`NETWORK_FILESYSTEMS`)
the index uses the rollback journal instead, and a one-line warning says to keep it on
a local disk or to point ``ALCHEMIST_DB_URL`` at a database server. The filesystem is
read from the mount table (``/proc/self/mountinfo``); where there is none, WAL is not
used either.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Float,
    Index,
    Integer,
    String,
    Text,
    and_,
    create_engine,
    delete,
    event,
    or_,
    select,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.pool import NullPool

from alchemist.job import config
from alchemist.job.jobdir import make_private_dir

log = logging.getLogger(__name__)


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

    #: A page of one owner's jobs, newest first, is read from this index alone
    #: (created by :func:`_create_tables` in an index an earlier version made, too).
    __table_args__ = (Index("ix_jobs_owner_created", "owner", "created", "id"),)


class MetaRow(_Base):
    """Facts about the index itself (e.g. that an owner's job folders were scanned)."""

    __tablename__ = "index_meta"

    key: Mapped[str] = mapped_column(String(300), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


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
        #: The SQLite database file; None for a database server or an in-memory SQLite.
        self.path: Path | None = sqlite_file(url)
        #: SQLite's journal mode for this file ("wal" or "delete"); None when not a file.
        self.journal_mode: str | None = None
        self._identity: tuple[int, int] | None = None
        kwargs: dict[str, Any] = {}
        sqlite = make_url(url).get_backend_name() == "sqlite"
        if sqlite:
            kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
        if self.path is not None:
            _create_private(self.path)
            self.journal_mode = journal_mode_for(self.path)
            if self.journal_mode != "wal":
                # A connection per use, closed after: no lock or handle is held open on a
                # shared filesystem, and every connection tries again to leave a WAL mode
                # an earlier version left (which needs all other connections closed).
                kwargs["poolclass"] = NullPool
        self.engine: Engine = create_engine(url, **kwargs)
        if sqlite:  # PRAGMAs are SQLite's alone: a database server gets none
            event.listen(self.engine, "connect", _sqlite_pragmas(self.journal_mode))
        _create_tables(self.engine)
        if self.path is not None:
            self._identity = _file_identity(self.path)

    def replaced(self) -> bool:
        """Whether the SQLite file this store opened was deleted or replaced since."""
        if self.path is None:
            return False
        try:
            return _file_identity(self.path) != self._identity
        except FileNotFoundError:
            return True
        except OSError:
            return False  # unreadable for now (a stale NFS handle): keep what we have

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

    def add_new(self, record: JobRecord) -> None:
        """Index a job just submitted. Its files are written before its row, so a listing
        in another process may have indexed it from them in between
        (:func:`alchemist.client._reindex`): that row is this job's, and stays.

        Raises:
            IntegrityError: the id belongs to another job (another owner or folder).
        """
        try:
            self.add(record)
        except IntegrityError:
            found = self.get(record.id)
            if found is None or (found.owner, found.job_dir) != (record.owner, record.job_dir):
                raise

    def get(self, job_id: str) -> JobRecord | None:
        with Session(self.engine) as s:
            row = s.get(JobRow, job_id)
            return JobRecord._from_row(row) if row else None

    def list(
        self,
        owner: str,
        state: str | None = None,
        limit: int | None = None,
        *,
        states: Collection[str] | None = None,
        before: tuple[float, str] | None = None,
        created_before: float | None = None,
    ) -> list[JobRecord]:
        """The owner's jobs, newest first (ties by id, descending).

        Args:
            state: only rows stored in this state; ``states``: in one of these.
            limit: at most this many rows.
            before: only rows after this ``(created, id)`` key in that order (the key of
                the last row of the previous page): pages never overlap or skip a row.
            created_before: only rows created before this time.

        A page is read from the ``(owner, created, id)`` index, so its cost does not
        grow with the owner's history.
        """
        q = select(JobRow).where(JobRow.owner == owner)
        if state:
            q = q.where(JobRow.state == state)
        if states is not None:
            q = q.where(JobRow.state.in_(list(states)))
        if before is not None:
            created, job_id = before
            q = q.where(
                or_(
                    JobRow.created < created,
                    and_(JobRow.created == created, JobRow.id < job_id),
                )
            )
        if created_before is not None:
            q = q.where(JobRow.created < created_before)
        q = q.order_by(JobRow.created.desc(), JobRow.id.desc())
        if limit:
            q = q.limit(limit)
        with Session(self.engine) as s:
            return [JobRecord._from_row(r) for r in s.scalars(q)]

    def count(self, owner: str) -> int:
        """How many jobs the owner has in the index."""
        from sqlalchemy import func

        with Session(self.engine) as s:
            return int(s.scalar(select(func.count()).where(JobRow.owner == owner)) or 0)

    def ids(self) -> set[str]:
        """The id of every job in the index (any owner's)."""
        with Session(self.engine) as s:
            return set(s.scalars(select(JobRow.id)))

    def get_meta(self, key: str) -> str | None:
        with Session(self.engine) as s:
            row = s.get(MetaRow, key)
            return row.value if row else None

    def set_meta(self, key: str, value: str) -> None:
        # merge reads, then inserts: two processes setting a new key at once (the first
        # listings on a fresh home) both insert, and the second fails on the key. Its
        # retry finds the row and updates it.
        for attempt in range(2):
            try:
                with Session(self.engine) as s, s.begin():
                    s.merge(MetaRow(key=key, value=value))
                return
            except IntegrityError:
                if attempt:
                    raise

    def update(self, job_id: str, **fields: Any) -> None:
        with Session(self.engine) as s, s.begin():
            row = s.get(JobRow, job_id)
            if row is None:
                return
            for k, v in fields.items():
                setattr(row, k, v)

    def delete(self, job_id: str, owner: str | None = None) -> bool:
        """Remove the job's row (only if it is ``owner``'s, when given); whether it did."""
        with Session(self.engine) as s, s.begin():
            q = delete(JobRow).where(JobRow.id == job_id)
            if owner is not None:
                q = q.where(JobRow.owner == owner)
            return bool(s.execute(q).rowcount)  # type: ignore[attr-defined]


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
            # An index made by an earlier version has the table without the page index.
            for index in _Base.metadata.tables[JobRow.__tablename__].indexes:
                index.create(engine, checkfirst=True)
            return
        except OperationalError as e:
            if "already exists" not in str(e) or attempt == attempts - 1:
                raise
            time.sleep(0.01 * (attempt + 1))


def sqlite_file(url: str) -> Path | None:
    """The database file an SQLite URL names (absolute); None for another database or
    an in-memory SQLite."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        return None
    database = u.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(os.path.abspath(os.path.expanduser(database)))


_SIBLINGS = ("", "-wal", "-shm", "-journal")


def _create_private(path: Path) -> None:
    """Make the database file 0600 (its folder 0700 if missing) before SQLite opens it.

    SQLite would create the file 0644 less the umask, and gives its ``-wal``, ``-shm``
    and ``-journal`` files the database file's mode: so creating the file 0600 here keeps
    all four the owner's. A file of ours left open to others by an earlier version is
    closed again.
    """
    make_private_dir(path.parent)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass  # an empty file is an empty SQLite database; an existing one is kept
    for suffix in _SIBLINGS:
        sibling = path.with_name(path.name + suffix)
        try:
            st = os.stat(sibling)
            if st.st_uid == os.geteuid() and st.st_mode & 0o077:
                os.chmod(sibling, st.st_mode & 0o700)
        except OSError:
            continue  # no such file, or another's: nothing of ours to close


def _file_identity(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


#: Filesystem types (as the mount table names them) whose files other hosts may open:
#: SQLite's WAL is unsafe there (its index lives in memory only one host shares).
#: Any FUSE filesystem (``fuse``, ``fuseblk``, ``fuse.<name>``) counts too.
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "ceph",
        "lustre",
        "glusterfs",
        "gpfs",
        "beegfs",
        "afs",
        "ocfs2",
        "gfs2",
        "orangefs",
        "pvfs2",
        "9p",
        "virtiofs",
        "davfs",
        "ncpfs",
        "coda",
    }
)


def is_network_filesystem(fstype: str) -> bool:
    """Whether files on a filesystem of type ``fstype`` may be shared with other hosts."""
    fstype = fstype.lower()
    return fstype in NETWORK_FILESYSTEMS or fstype.startswith("fuse")


def _unescape(field: str) -> str:
    # The mount table writes space, tab, newline and backslash as \040, \011, \012, \134.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mounts(table: str) -> list[tuple[str, str]]:
    """(mount point, filesystem type) of each line of ``/proc/self/mountinfo`` (or of
    ``/proc/mounts``, whose lines have no ``-`` separator), in the table's order."""
    found = []
    for line in table.splitlines():
        fields = line.split()
        if "-" in fields[6:]:  # mountinfo: id parent dev root MOUNTPOINT opts [tags] - TYPE
            sep = fields.index("-", 6)
            if sep + 1 < len(fields):
                found.append((_unescape(fields[4]), fields[sep + 1]))
        elif len(fields) >= 3:  # /proc/mounts: SOURCE MOUNTPOINT TYPE opts 0 0
            found.append((_unescape(fields[1]), fields[2]))
    return found


def filesystem_type(path: str | Path, mount_table: str) -> str | None:
    """The type of the filesystem that holds ``path`` (absolute, symbolic links
    resolved), read from ``mount_table``, the text of ``/proc/self/mountinfo`` or
    ``/proc/mounts``; None when no mount holds it.

    The mount with the longest mount point that contains ``path`` holds it; of mounts
    on the same point, the last one (mounted over the others).
    """
    target = str(path)
    best: tuple[int, str] | None = None
    for mount_point, fstype in _mounts(mount_table):
        prefix = mount_point.rstrip("/")  # "" for the root
        holds = target in (mount_point, prefix) or target.startswith(prefix + "/")
        if holds and (best is None or len(prefix) >= best[0]):
            best = (len(prefix), fstype)
    return None if best is None else best[1]


def _mount_table() -> str | None:
    for source in ("/proc/self/mountinfo", "/proc/mounts"):
        try:
            return Path(source).read_text(errors="replace")
        except OSError:
            continue
    return None


_warned: set[Path] = set()


def journal_mode_for(db_file: Path) -> str:
    """SQLite's journal mode for ``db_file``: ``"wal"`` on a filesystem of this machine,
    ``"delete"`` (the rollback journal) on a network filesystem or where the mount table
    cannot be read. Warns once per file, in one line, when the file is on a network
    filesystem."""
    table = _mount_table()
    resolved = os.path.realpath(db_file)
    fstype = filesystem_type(resolved, table) if table is not None else None
    if fstype is None:
        return "delete"
    if not is_network_filesystem(fstype):
        return "wal"
    if db_file not in _warned:
        _warned.add(db_file)
        log.warning(
            "alchemist: the job index %s is on a network filesystem (%s): it uses SQLite's rollback"
            " journal, not WAL; keep it on a local disk (ALCHEMIST_HOME) or point"
            " ALCHEMIST_DB_URL at a database server (e.g. postgresql://...)",
            db_file,
            fstype,
        )
    return "delete"


def _sqlite_pragmas(journal_mode: str | None) -> Callable[[Any, Any], None]:
    """The ``connect`` hook of an SQLite store: a busy timeout and ``journal_mode``.

    WAL lets the kernel, the Jupyter server and the CLI read while one writes; on a
    network filesystem the rollback journal is the safe mode. An index left in WAL mode
    by an earlier version leaves it at the first connection made while no other process
    has it open (a connection attempt waits at most 0.2 s for that).
    """

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        try:
            if journal_mode is not None:
                current = str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower()
                if current != journal_mode:
                    # Leaving WAL needs every other connection closed: do not wait long.
                    cur.execute("PRAGMA busy_timeout=200")
                    try:
                        cur.execute(f"PRAGMA journal_mode={journal_mode}")
                    except sqlite3.OperationalError as e:
                        log.debug("journal_mode stays %s for now: %s", current, e)
            cur.execute("PRAGMA busy_timeout=30000")
        finally:
            cur.close()

    return on_connect


_stores: dict[str, JobStore] = {}
_stores_lock = threading.Lock()


def get_store() -> JobStore:
    """The store for the configured URL (one per URL and process; thread-safe).

    An SQLite file deleted or replaced since it was opened is opened again, so that a
    deleted index is rebuilt (from the job directories, by the next listing) rather than
    kept alive unseen in this process.
    """
    url = config.db_url()
    with _stores_lock:
        store = _stores.get(url)
        if store is not None and store.replaced():
            store.engine.dispose()
            store = None
        if store is None:
            store = _stores[url] = JobStore(url)
        return store


def now() -> float:
    return time.time()
