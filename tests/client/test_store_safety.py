"""The job index cannot be corrupted by sharing, is its owner's alone, and can be rebuilt.

What is real: SQLite, SQLAlchemy, the store, the machine's own mount table
(``/proc/self/mountinfo``), file modes under real umasks, ``alchemist.submit`` and the
listing. Stand-ins: network filesystems (no NFS, CIFS or FUSE server here) are mount-table
texts given to the detection, or put in place of the machine's table; a database server
(no PostgreSQL here) is an engine factory that records what the store asks of it; the
backends are the named fakes of :mod:`alchemist.testing.fakes`. "Another user" is the real
``nobody`` account (only when the tests run as root).
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine

from alchemist import client, store
from alchemist.job import config
from alchemist.store import (
    JobStore,
    filesystem_type,
    is_network_filesystem,
    journal_mode_for,
    sqlite_file,
)
from alchemist.testing.fakes import (
    FailingBackend,
    InstantBackend,
    NeverStartsBackend,
    SlowCancelBackend,
)
from tests.support.helpers import as_nobody, job_record

# A mount table as /proc/self/mountinfo writes it: optional tag fields, a mount point
# with an escaped space, a local folder mounted inside an NFS one, two mounts stacked
# on one point (the later is on top), and a mount point that is a prefix of another name.
MOUNTINFO = r"""22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 22 0:22 / /proc rw,nosuid - proc proc rw
30 22 0:40 / /mnt/shared rw,relatime shared:7 master:3 - nfs4 fs1:/export/alchemist rw,vers=4.2
31 30 254:1 / /mnt/shared/scratch rw,relatime - xfs /dev/vdb rw
32 22 0:41 / /mnt/team\040data rw,relatime - cifs //files/team rw
33 22 0:42 / /mnt/lab rw,nosuid,nodev - fuse.sshfs user@lab:/data rw,user_id=0
34 22 0:43 / /mnt/a rw - lustre 10.0.0.1@tcp:/lfs rw
35 22 254:2 / /data rw,relatime - ext4 /dev/vdc rw
36 35 0:44 / /data rw,relatime - glusterfs gl:/vol rw
37 22 0:45 / /mnt/ceph rw - ceph 10.0.0.2:/ rw
"""

# The same kind of facts as /proc/mounts writes them (the fallback when mountinfo is missing).
PROC_MOUNTS = r"""/dev/vda / ext4 rw,relatime 0 0
fs1:/export /home nfs rw,vers=3 0 0
/dev/vdb /home/local\040disk ext4 rw 0 0
"""


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    """``umask(m)`` sets this process's umask for the test; the old one comes back after."""
    old = os.umask(0o022)
    os.umask(old)

    def set_umask(mask: int) -> None:
        os.umask(mask)

    yield set_umask
    os.umask(old)


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder every account may enter (pytest's own tmp folders are root's alone, so
    they would hide a file from another user whatever the file's own mode)."""
    folder = Path(tempfile.mkdtemp(prefix="alchemist-store-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


# -- which filesystem holds the index ------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "fstype"),
    [
        ("/", "ext4"),
        ("/home/ana/.alchemist/jobs.sqlite", "ext4"),
        ("/mnt/shared", "nfs4"),
        ("/mnt/shared/alchemist/jobs.sqlite", "nfs4"),
        ("/mnt/shared/scratch/jobs.sqlite", "xfs"),  # a local disk mounted inside NFS
        ("/mnt/sharedx/jobs.sqlite", "ext4"),  # not under /mnt/shared
        ("/mnt/team data/jobs.sqlite", "cifs"),  # \040 in the table is a space
        ("/mnt/lab/jobs.sqlite", "fuse.sshfs"),
        ("/mnt/ab/jobs.sqlite", "ext4"),  # /mnt/a is a prefix of the name, not a parent
        ("/mnt/a/jobs.sqlite", "lustre"),
        ("/data/jobs.sqlite", "glusterfs"),  # mounted over the ext4 at /data
        ("/mnt/ceph/x/y/jobs.sqlite", "ceph"),
    ],
)
def test_the_filesystem_holding_a_path_is_read_from_mountinfo(path: str, fstype: str) -> None:
    assert filesystem_type(path, MOUNTINFO) == fstype


def test_proc_mounts_is_read_too_and_an_empty_table_holds_nothing() -> None:
    assert filesystem_type("/home/ana/.alchemist/jobs.sqlite", PROC_MOUNTS) == "nfs"
    assert filesystem_type("/home/local disk/jobs.sqlite", PROC_MOUNTS) == "ext4"
    assert filesystem_type("/var/jobs.sqlite", PROC_MOUNTS) == "ext4"
    assert filesystem_type("/var/jobs.sqlite", "") is None


@pytest.mark.parametrize(
    "fstype",
    ["nfs", "nfs4", "cifs", "smb3", "ceph", "lustre", "glusterfs", "fuse", "fuse.sshfs"],
)
def test_network_filesystems_are_recognised(fstype: str) -> None:
    assert is_network_filesystem(fstype)


@pytest.mark.parametrize("fstype", ["ext4", "xfs", "btrfs", "zfs", "tmpfs", "overlay"])
def test_local_filesystems_are_not_network_ones(fstype: str) -> None:
    assert not is_network_filesystem(fstype)


def test_the_machines_own_mount_table_agrees_with_findmnt(tmp_path: Path) -> None:
    """The real mount table, checked against util-linux's ``findmnt`` (another reader)."""
    findmnt = shutil.which("findmnt")
    if findmnt is None:
        pytest.skip("findmnt (util-linux) is not installed")
    expected = subprocess.run(
        [findmnt, "-n", "-o", "FSTYPE", "--target", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    table = Path("/proc/self/mountinfo").read_text()
    assert filesystem_type(os.path.realpath(tmp_path), table) == expected


# -- WAL only on a local disk --------------------------------------------------------------


def _journal_mode_on_disk(path: Path) -> str:
    db = sqlite3.connect(path)
    try:
        return str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    finally:
        db.close()


def test_an_index_on_a_local_disk_uses_wal(tmp_path: Path) -> None:
    """The real machine: tmp_path is on a local filesystem, so the index is in WAL mode."""
    table = Path("/proc/self/mountinfo").read_text()
    fstype = filesystem_type(os.path.realpath(tmp_path), table)
    assert fstype is not None and not is_network_filesystem(fstype), fstype
    s = JobStore(f"sqlite:///{tmp_path / 'jobs.sqlite'}")
    s.add(job_record("j1"))
    assert s.journal_mode == "wal"
    assert _journal_mode_on_disk(tmp_path / "jobs.sqlite") == "wal"


def _nfs_over(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Make the store see ``folder`` as an NFS mount (the stand-in for a real one)."""
    table = MOUNTINFO + f"40 22 0:50 / {os.path.realpath(folder)} rw - nfs4 fs1:/export rw\n"
    monkeypatch.setattr(store, "_mount_table", lambda: table)


def test_an_index_on_nfs_uses_the_rollback_journal_and_warns_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _nfs_over(monkeypatch, tmp_path)
    db = tmp_path / "jobs.sqlite"
    with caplog.at_level(logging.WARNING, logger="alchemist.store"):
        s = JobStore(f"sqlite:///{db}")
        s.add(job_record("j1"))
        JobStore(f"sqlite:///{db}").add(job_record("j2"))  # a second store: no second warning
    assert s.journal_mode == "delete"
    assert _journal_mode_on_disk(db) == "delete"
    assert not db.with_name("jobs.sqlite-wal").exists()
    warnings = [r.getMessage() for r in caplog.records if r.name == "alchemist.store"]
    assert len(warnings) == 1, warnings
    (line,) = warnings
    assert "\n" not in line
    assert "network filesystem (nfs4)" in line
    assert "local disk" in line and "ALCHEMIST_DB_URL" in line
    assert sorted(r.id for r in s.list("ana")) == ["j1", "j2"]


@pytest.mark.skipif(
    shutil.which("bindfs") is None or os.geteuid() != 0,
    reason="a real FUSE mount needs bindfs (apt-get install bindfs) and root",
)
def test_an_index_on_a_real_fuse_mount_uses_the_rollback_journal(tmp_path: Path) -> None:
    """A real FUSE filesystem (bindfs over a local folder) and the real mount table."""
    source, mount = tmp_path / "source", tmp_path / "mount"
    source.mkdir()
    mount.mkdir()
    subprocess.run(["bindfs", str(source), str(mount)], check=True, timeout=30)
    try:
        s = JobStore(f"sqlite:///{mount / 'index' / 'jobs.sqlite'}")
        s.add(job_record("j1"))
        assert s.journal_mode == "delete"
        assert _journal_mode_on_disk(source / "index" / "jobs.sqlite") == "delete"
        assert [r.id for r in s.list("ana")] == ["j1"]
        s.engine.dispose()
    finally:
        subprocess.run(["umount", str(mount)], check=True, timeout=30)


def test_an_index_left_in_wal_on_nfs_leaves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index an earlier version put in WAL mode on NFS is switched to the rollback journal."""
    db = tmp_path / "jobs.sqlite"
    old = JobStore(f"sqlite:///{db}")  # an earlier version, on a local disk: WAL
    old.add(job_record("old"))
    assert _journal_mode_on_disk(db) == "wal"
    _nfs_over(monkeypatch, tmp_path)
    s = JobStore(f"sqlite:///{db}")
    # While the earlier process still has the index open it cannot leave WAL; the
    # store neither fails nor stalls meanwhile.
    began = time.monotonic()
    s.add(job_record("new"))
    assert sorted(r.id for r in s.list("ana")) == ["new", "old"]
    assert time.monotonic() - began < 5
    assert _journal_mode_on_disk(db) == "wal"
    old.engine.dispose()  # the earlier process ends
    assert sorted(r.id for r in s.list("ana")) == ["new", "old"]
    assert _journal_mode_on_disk(db) == "delete"
    assert not db.with_name("jobs.sqlite-wal").exists()


def test_without_a_mount_table_wal_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "_mount_table", lambda: None)
    assert journal_mode_for(tmp_path / "jobs.sqlite") == "delete"


# -- a database server instead of SQLite ---------------------------------------------------


def test_sqlite_file_is_read_from_the_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert sqlite_file("sqlite:///jobs.sqlite") == tmp_path / "jobs.sqlite"
    assert sqlite_file(f"sqlite+pysqlite:///{tmp_path}/x.db") == tmp_path / "x.db"
    assert sqlite_file("sqlite://") is None
    assert sqlite_file("sqlite:///:memory:") is None
    assert sqlite_file("postgresql://alchemist@db.internal:5432/alchemist") is None


def test_a_database_server_url_gets_no_sqlite_pragma_and_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stand-in for PostgreSQL: the engine factory records what the store asks for, and
    hands back an in-memory SQLite engine so that the tables can be made."""
    asked: list[tuple[str, dict[str, Any]]] = []
    engines = []

    def fake_create_engine(url: str, **kwargs: Any) -> Any:
        asked.append((url, kwargs))
        engines.append(create_engine("sqlite://"))
        return engines[-1]

    hooks: list[str | None] = []
    real_hook = store._sqlite_pragmas

    def recording_hook(journal_mode: str | None) -> Callable[[Any, Any], None]:
        hooks.append(journal_mode)
        return real_hook(journal_mode)

    monkeypatch.setattr(store, "create_engine", fake_create_engine)
    monkeypatch.setattr(store, "_sqlite_pragmas", recording_hook)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    url = "postgresql://alchemist@db.internal:5432/alchemist"
    s = JobStore(url)
    assert asked == [(url, {})]  # no SQLite connect_args
    assert hooks == []  # no PRAGMA hook is made for a database server
    assert s.path is None and s.journal_mode is None and not s.replaced()
    assert list(cwd.iterdir()) == []  # and no file is made
    # The control: the same store on an SQLite URL does get the hook.
    JobStore(f"sqlite:///{cwd / 'jobs.sqlite'}")
    assert hooks == ["wal"]


def test_an_in_memory_sqlite_store_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    s = JobStore("sqlite://")
    s.add(job_record("m1"))
    assert [r.id for r in s.list("ana")] == ["m1"]
    assert s.path is None and s.journal_mode is None
    assert list(cwd.iterdir()) == []


# -- the index is its owner's alone --------------------------------------------------------


@pytest.mark.parametrize("mask", [0o022, 0o000])
def test_the_index_file_and_its_journals_are_0600_in_a_0700_folder(
    mask: int, tmp_path: Path, umask: Callable[[int], None]
) -> None:
    umask(mask)
    folder = tmp_path / "fresh" / "index"
    db = folder / "jobs.sqlite"
    s = JobStore(f"sqlite:///{db}")
    s.add(job_record("j1"))
    assert _mode(tmp_path / "fresh") == 0o700
    assert _mode(folder) == 0o700
    # WAL: the store's pooled connection keeps -wal and -shm in place.
    assert db.with_name("jobs.sqlite-wal").exists() and db.with_name("jobs.sqlite-shm").exists()
    for name in ("jobs.sqlite", "jobs.sqlite-wal", "jobs.sqlite-shm"):
        assert _mode(folder / name) == 0o600, name
    # The rollback journal exists while a write transaction is open (a connection of
    # SQLite's own: the journal's mode comes from the database file's).
    s.engine.dispose()
    raw = sqlite3.connect(db, isolation_level=None)
    try:
        raw.execute("PRAGMA journal_mode=DELETE")
        raw.execute("BEGIN IMMEDIATE")
        raw.execute(
            "INSERT INTO jobs (id, owner, name, backend, state, created, restarts,"
            " spec, job_dir) VALUES ('j2', 'ana', 'j', 'local', 'pending', 0, 0, '{}', '/')"
        )
        assert _mode(folder / "jobs.sqlite-journal") == 0o600
        raw.execute("COMMIT")
    finally:
        raw.close()


def test_a_fresh_alchemist_home_and_its_index_are_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: Callable[[int], None]
) -> None:
    umask(0o000)
    home = tmp_path / "new-home"
    monkeypatch.setenv("ALCHEMIST_HOME", str(home))
    s = store.get_store()
    s.add(job_record("j1"))
    assert _mode(home) == 0o700
    assert _mode(home / "jobs.sqlite") == 0o600


def test_an_index_an_earlier_version_left_readable_is_closed(tmp_path: Path) -> None:
    db = tmp_path / "jobs.sqlite"
    db.touch()
    os.chmod(db, 0o644)
    JobStore(f"sqlite:///{db}").add(job_record("j1"))
    assert _mode(db) == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another account")
@pytest.mark.parametrize("mask", [0o022, 0o000])
def test_another_user_cannot_read_the_index(
    mask: int, open_folder: Path, umask: Callable[[int], None]
) -> None:
    """``nobody`` tries to read the index in a folder it may enter, and fails."""
    umask(mask)
    db = open_folder / "jobs.sqlite"
    JobStore(f"sqlite:///{db}").add(job_record("secret-job"))
    control = open_folder / "readable.txt"
    control.write_text("anyone")
    os.chmod(control, 0o644)
    assert as_nobody("cat", str(control)).stdout == "anyone"  # nobody does reach this folder
    for name in ("jobs.sqlite", "jobs.sqlite-wal", "jobs.sqlite-shm"):
        denied = as_nobody("cat", str(open_folder / name))
        assert denied.returncode != 0 and "Permission denied" in denied.stderr, name
    # An index folder Alchemist makes is closed too: nobody cannot even list it.
    JobStore(f"sqlite:///{open_folder / 'made' / 'jobs.sqlite'}").add(job_record("j"))
    listing = as_nobody("ls", str(open_folder / "made"))
    assert listing.returncode != 0 and "Permission denied" in listing.stderr


# -- the job directories are the truth: a deleted index is rebuilt -------------------------


def _snapshot(jobs: list[client.Job]) -> list[tuple[str, str, str, str | None, float]]:
    return [(j.id, j.name, j.status().state.value, j.status().reason, j.created) for j in jobs]


@pytest.mark.parametrize("process", ["same process", "new process"])
def test_a_deleted_index_is_rebuilt_from_the_job_directories(
    process: str, fake_backend: Callable[[type], str], alchemist_home: Path
) -> None:
    """Submit jobs that end in every kind of state, delete the index file (and its
    journals) and list: every job is back, with its state and reason, in the listing
    and in the rebuilt index. "same process" keeps this process's open store (as a
    long-running Jupyter server would); "new process" starts from no store."""
    instant = fake_backend(InstantBackend)
    failing = fake_backend(FailingBackend)
    never = fake_backend(NeverStartsBackend)
    running = fake_backend(SlowCancelBackend)
    submitted = [
        client.submit("x = 1", namespace={}, backend=instant, name="ok"),
        client.submit("x = 1", namespace={}, backend=failing, name="broken"),
        client.submit("x = 1", namespace={}, backend=never, name="waits"),
        client.submit("x = 1", namespace={}, backend=never, name="stopped"),
        client.submit("x = 1", namespace={}, backend=running, name="runs"),
    ]
    submitted[3].cancel()
    before = _snapshot(client.jobs())
    assert sorted(state for _, _, state, _, _ in before) == [
        "cancelled",
        "failed",
        "pending",
        "running",
        "succeeded",
    ]

    db = alchemist_home / "jobs.sqlite"
    assert db.exists()
    for suffix in ("", "-wal", "-shm", "-journal"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)
    if process == "new process":
        store._stores.clear()

    listing = client.list_jobs()
    assert listing.skipped == []
    assert _snapshot(listing.jobs) == before
    assert db.exists()
    # The index itself holds the jobs again, with their states, not only the listing.
    fresh = JobStore(f"sqlite:///{db}")
    rows = {r.id: (r.name, r.state, r.reason) for r in fresh.list(config.current_user())}
    assert rows == {job_id: (name, state, reason) for job_id, name, state, reason, _ in before}


class _RefusingBackend(InstantBackend):
    """Accepts the dry run, then refuses at submit (a cluster's quota, a dead API)."""

    def submit(self, req: Any, info: Any = None) -> Any:
        from alchemist.errors import BackendError

        raise BackendError("the cluster refused the job: quota exhausted")


def test_a_job_refused_at_submit_keeps_its_reason_after_a_rebuild(
    fake_backend: Callable[[type], str], alchemist_home: Path
) -> None:
    """The refusal is written to the job directory (the truth), not only to the index: a
    rebuilt index says why the job failed instead of asking the backend again."""
    from alchemist.errors import BackendError

    refusing = fake_backend(_RefusingBackend)
    with pytest.raises(BackendError, match="quota exhausted"):
        client.submit("x = 1", namespace={}, backend=refusing, name="refused")
    db = alchemist_home / "jobs.sqlite"
    for suffix in ("", "-wal", "-shm", "-journal"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)
    store._stores.clear()
    (job,) = client.jobs()
    status = job.status()
    assert (job.name, status.state.value) == ("refused", "failed")
    assert status.reason == "the cluster refused the job: quota exhausted"
