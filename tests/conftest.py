"""Fixtures shared by every test.

Each test gets its own ``ALCHEMIST_HOME`` (job store and job directories) and fails if
it leaves a process behind that runs from that home: jobs must never leak workers.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent


def _warm_ranks(path: Path) -> list[psutil.Process]:
    """Live ranks of jobs under ``path`` forked from a warm pool: their command line is
    the zygote's, so their pid files find them (a pid reused since is not theirs)."""
    found = []
    for pid_file in path.glob("**/pids/rank-*.pid"):
        try:
            proc = psutil.Process(int(pid_file.read_text().strip()))
            if proc.create_time() <= pid_file.stat().st_mtime + 1 and proc.status() != (
                psutil.STATUS_ZOMBIE
            ):
                found.append(proc)
        except (psutil.Error, OSError, ValueError):
            continue
    return found


def processes_under(path: Path) -> list[psutil.Process]:
    """Live processes whose command line mentions ``path`` (job launchers and ranks),
    and ranks of its jobs forked from a warm pool."""
    marker = str(path)
    found = _warm_ranks(path)
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(marker in arg for arg in proc.info["cmdline"] or []) and proc not in found:
                found.append(proc)
        except psutil.Error:
            continue
    return [p for p in found if p.pid != os.getpid()]


@pytest.fixture(autouse=True, scope="session")
def warm_pools() -> Iterator[Path]:
    """The warm pools of this test run: in a folder of their own (short, for the unix
    socket's path), all stopped at the end, so that no daemon outlives the run."""
    import shutil
    import tempfile

    from alchemist.backends.local.pool import client

    folder = Path(tempfile.mkdtemp(prefix="alch-pools-"))
    old = os.environ.get("ALCHEMIST_POOL_DIR")
    os.environ["ALCHEMIST_POOL_DIR"] = str(folder)
    yield folder
    for pool in folder.iterdir():
        if pool.is_dir():
            client.stop(pool)
    if old is None:
        os.environ.pop("ALCHEMIST_POOL_DIR", None)
    else:
        os.environ["ALCHEMIST_POOL_DIR"] = old
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def alchemist_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "alchemist-home"
    home.mkdir()
    monkeypatch.setenv("ALCHEMIST_HOME", str(home))
    monkeypatch.delenv("ALCHEMIST_DB_URL", raising=False)
    monkeypatch.delenv("ALCHEMIST_BACKEND", raising=False)
    # The local queue is machine-wide by default; each test gets its own, and room for
    # the small jobs tests run side by side (the queue's own tests set their capacity).
    monkeypatch.setenv("ALCHEMIST_ADMISSION_DIR", str(home / "admission"))
    monkeypatch.setenv("ALCHEMIST_LOCAL_CPU_SLOTS", "64")
    monkeypatch.delenv("ALCHEMIST_LOCAL_GPUS", raising=False)
    yield home
    # A supervisor writes the job's final state just before it exits: give processes
    # that are ending on their own a moment, then fail for any that still run.
    _gone, left = psutil.wait_procs(processes_under(home), timeout=5)
    if left:
        desc = [" ".join(p.cmdline()[:6]) for p in left if p.is_running()]
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=5)
        pytest.fail(f"test left {len(left)} process(es) behind: {desc}")
    _remove_runtime_folders(home)


def _remove_runtime_folders(home: Path) -> None:
    """The runtime folders (``config.runtime_dir``) this test's home made in the
    machine's temporary directory: a real user keeps one; a test run would leave one
    per test."""
    import shutil
    import tempfile

    for pointer in (home / "runtime").glob("[!.]*"):
        with contextlib.suppress(OSError):
            folder = Path(pointer.read_text().strip())
            made_here = folder.parent == Path(tempfile.gettempdir()) and folder.name.startswith(
                f"alchemist-{os.getuid()}-"
            )
            if made_here and folder.is_dir() and not folder.is_symlink():
                shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def fake_backend() -> Iterator[Callable[[type], str]]:
    """``name = fake_backend(InstantBackend)``: register one of
    :mod:`alchemist.testing.fakes` for this test; returns its name."""
    from alchemist.backends import register_backend

    names: list[str] = []

    def register(cls: type) -> str:
        register_backend(cls.name, cls())
        names.append(cls.name)
        return str(cls.name)

    yield register
    for name in names:
        register_backend(name, None)


@pytest.fixture
def submit() -> Iterator[Callable[..., Any]]:
    """``submit(cell, namespace=None, **options)``: a real 2-rank job on the local backend
    (``alchemist.client.submit``), cancelled at the end of the test (the diagnosis and
    monitor tests)."""
    from alchemist import client

    jobs: list[client.Job] = []

    def start(cell: str, namespace: dict[str, Any] | None = None, **options: Any) -> client.Job:
        job = client.submit(cell, namespace=namespace or {}, workers=2, **options)
        jobs.append(job)
        return job

    yield start
    for job in jobs:
        job.cancel()
        assert job.status().state.is_terminal
