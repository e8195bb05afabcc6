"""The real-cluster suite's ALCHEMIST_HOME (conftest.py), without a cluster: job tests
get a folder on the shared volume, so that they can run at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.k8s_real import conftest


def test_each_test_gets_a_home_of_its_own_on_the_shared_volume(alchemist_home: Path) -> None:
    assert os.environ["ALCHEMIST_HOME"] == str(alchemist_home)
    root = conftest.shared_root()
    if root is None:
        assert not conftest.MOUNT_PATH or not Path(conftest.MOUNT_PATH).is_dir()
    else:
        assert alchemist_home.is_relative_to(root)
        assert alchemist_home.is_relative_to(conftest.MOUNT_PATH)


def test_the_shared_root_follows_the_mount_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    volume = tmp_path / "volume"
    (volume / "alice").mkdir(parents=True)
    monkeypatch.setattr(conftest, "MOUNT_PATH", "")
    monkeypatch.setattr(conftest, "STARTED_HOME", str(volume / "alice"))
    assert conftest.shared_root() is None, "without a mount path no folder is on the volume"
    monkeypatch.setattr(conftest, "MOUNT_PATH", str(volume))
    assert conftest.shared_root() == volume / "alice", "the started home, on the volume"
    monkeypatch.setattr(conftest, "STARTED_HOME", str(tmp_path / "elsewhere"))
    assert conftest.shared_root() == volume, "a home off the volume is not used"
