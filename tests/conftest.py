"""Fixtures shared by every test.

Each test gets its own ``ALCHEMIST_HOME`` (job store and job directories) and fails if
it leaves a process behind that runs from that home: jobs must never leak workers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent


def processes_under(path: Path) -> list[psutil.Process]:
    """Live processes whose command line mentions ``path`` (job launchers and ranks)."""
    marker = str(path)
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(marker in arg for arg in proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            continue
    return [p for p in found if p.pid != os.getpid()]


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
