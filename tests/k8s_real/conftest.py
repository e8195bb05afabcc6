"""The real-cluster suite's ALCHEMIST_HOME: on the shared volume, where the pods see it.

Every other test folder gets a temporary ALCHEMIST_HOME (tests/conftest.py), which a
real cluster's pods cannot see, so job tests here would always skip. Here each test gets
a folder of its own on the shared volume instead, when ALCHEMIST_K8S_MOUNT_PATH says
where this process sees it (the pods mount it at the same path): under the
ALCHEMIST_HOME the run was started with when that lies on the volume, else under the
mount path itself. Without it, a temporary folder (the dry-run and attack tests need no
volume; the job tests skip and say what to set). The folder is removed after the test.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

#: As the run was started, before any fixture changes it.
STARTED_HOME = os.environ.get("ALCHEMIST_HOME", "")
MOUNT_PATH = os.environ.get("ALCHEMIST_K8S_MOUNT_PATH", "")


def shared_root() -> Path | None:
    """Where this run's job folders go on the shared volume, or None."""
    if not MOUNT_PATH or not Path(MOUNT_PATH).is_dir():
        return None
    home = Path(STARTED_HOME)
    if STARTED_HOME and home.is_absolute() and home.is_relative_to(MOUNT_PATH):
        return home
    return Path(MOUNT_PATH)


@pytest.fixture(autouse=True)
def alchemist_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Path]:
    root = shared_root()
    if root is None:
        home = tmp_path / "alchemist-home"
    else:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:80]
        home = root / "k8s-real-tests" / f"{os.getpid()}-{name}"
    home.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("ALCHEMIST_HOME", str(home))
    monkeypatch.delenv("ALCHEMIST_DB_URL", raising=False)
    yield home
    if root is not None:
        shutil.rmtree(home, ignore_errors=True)
